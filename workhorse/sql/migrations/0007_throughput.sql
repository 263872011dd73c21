-- Throughput: a slot records its finished jobs and claims their replacements in one statement.
\ir ../functions/_record_successes_v1.sql
\ir ../functions/claim_v3.sql
