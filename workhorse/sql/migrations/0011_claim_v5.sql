-- claim_v5: claim_v4 with its moved key heads looked up by key (and _refresh_heads_v2, the same
-- for the heads a hint refresh drops), and a leaner per-key statement when the queue has no rate
-- limit. claim_v4 stays, for workers still running the code that calls it.

\ir ../functions/_refresh_heads_v2.sql
\ir ../functions/claim_v5.sql
