-- claim_v5: claim_v4 with a leaner per-key statement when the queue has no rate limit. claim_v4
-- stays, for workers still running the code that calls it.

\ir ../functions/claim_v5.sql
