-- claim_v4: claim_v3's record-and-claim on cached generic plans. And the outcome functions in
-- versions that look jobs up by id (`status IN ('active', '')`): their predecessors' `status =
-- 'active'` let the planner read every active job of every queue through jobs_active_idx
-- whenever the statistics showed few active jobs, as they do after an ANALYZE of a backlog.

\ir ../functions/_record_successes_v2.sql
\ir ../functions/complete_v3.sql
\ir ../functions/claim_v4.sql
\ir ../functions/heartbeat_v2.sql
\ir ../functions/fail_v3.sql
\ir ../functions/snooze_v2.sql
\ir ../functions/release_v2.sql
