-- The dashboard's task filter over a long history (issue #32, docs/design.md "The dashboard in an
-- incident"; benchmarks/README.md "The dashboard's pages").
--
-- A task substring matched the succeeded history only through a window of the primary key,
-- 100,000 rows read and lower()ed per window, and an older page of a rare task reads three
-- windows (its page, where the newer page starts, the count of the newest window): 200-330 ms.
-- With this index the search first turns the substring into the succeeded task names it
-- matches (a skip scan: one probe per distinct name, statements/dashboard_succeeded_tasks.sql)
-- and reads each window's succeeded matches by (task, id) ranges; the other statuses keep their
-- own partial indexes.
--
-- Partial (succeeded only), so it costs one index entry per job, written by the update that
-- completes it: an enqueue, a claim and a heartbeat do not touch it (their rows are not
-- succeeded), and a failed, held or canceled job never enters it. The queue and the key are
-- included, so that the dashboard's queue and key filters are checked in the index (an
-- index-only scan) rather than in each matching row.
CREATE INDEX jobs_succeeded_task_idx ON workhorse.jobs (task, id) INCLUDE (queue, ckey)
    WHERE status = 'succeeded';
