-- Progress from a running handler (issue #27, docs/design.md "Job keys: ... progress").
--
-- `progress` is the latest value a handler reported, as the slot last wrote it:
-- {"done": n, "total": n|null, "message": text|null, "fence": the claim's fence, "seq": the
-- handler's call count}. `progress_at` is the database-clock time of that write.
--
-- A new attempt starts with no progress without any change to the claim: readers show the value
-- only while its "fence" equals the job's fence (the claim gives every attempt a new fence, and
-- complete, fail and snooze keep it), so a value from an older attempt reads as none. "seq"
-- orders the writes of one attempt: the slot's periodic write and the flush before an outcome
-- may race, and an older value never replaces a newer one.
--
-- Only write_progress.sql writes these columns (no function of an older release reads them), so
-- they need no feature level: a 0.2.0 worker ignores them.
ALTER TABLE workhorse.jobs
    ADD COLUMN progress jsonb,
    ADD COLUMN progress_at timestamptz;
