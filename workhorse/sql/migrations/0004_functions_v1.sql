-- Version 1 of the SQL API. Each function lives in its own file under functions/, named after it;
-- this migration applies them (`\ir`, as psql would). A released function file never changes:
-- a new behaviour is a new version (claim_v2.sql, with its own _v2 helpers where they differ),
-- applied by a new migration beside the old one, so that workers still running the old code keep
-- calling exactly what they were written against.
\ir ../functions/_admission_lock_id_v1.sql
\ir ../functions/_enqueue_gate_id_v1.sql
\ir ../functions/notification_channel_v1.sql
\ir ../functions/_wake_v1.sql
\ir ../functions/listen_v1.sql
\ir ../functions/_hint_keys_v1.sql
\ir ../functions/_refresh_heads_v1.sql
\ir ../functions/_rebuild_heads_v1.sql
\ir ../functions/_drop_heads_v1.sql
\ir ../functions/enqueue_v1.sql
\ir ../functions/_prepare_queue_v1.sql
\ir ../functions/_activate_v1.sql
\ir ../functions/_queue_order_candidates_v1.sql
\ir ../functions/claim_v1.sql
\ir ../functions/heartbeat_v1.sql
\ir ../functions/complete_v1.sql
\ir ../functions/fail_v1.sql
\ir ../functions/sync_concurrency_policies_v1.sql
\ir ../functions/_after_operator_change_v1.sql
\ir ../functions/retry_jobs_v1.sql
\ir ../functions/cancel_jobs_v1.sql
