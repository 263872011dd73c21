-- Throughput: a slot records its finished jobs and claims their replacements in one statement,
-- and gives back the jobs it claimed ahead and did not start; a snoozed job waits without
-- using an attempt; a success or failure resent after a broken connection is recognised.

-- The occurrence a job fired by a schedule stands for (schedules, 0008); claim_v3 returns it.
ALTER TABLE workhorse.jobs ADD COLUMN scheduled_for timestamptz;

\ir ../functions/_record_successes_v1.sql
\ir ../functions/complete_v2.sql
\ir ../functions/fail_v2.sql
\ir ../functions/claim_v3.sql
\ir ../functions/release_v1.sql
\ir ../functions/snooze_v1.sql
