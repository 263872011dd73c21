-- A job's steps (docs/design.md "Durable execution"), in the order it first reached them, each
-- with the database's clock (one row of NULLs but the clock when it has none): a running job
-- reads them once per run (at its first step call), a handle lists them.
SELECT s.name, s.kind, s.created_at, s.recorded_at, s.wake_at, s.signal, s.result, s.error,
       c.now
FROM (SELECT clock_timestamp() AS now) AS c
LEFT JOIN workhorse.job_steps s ON s.job_id = %s
ORDER BY s.created_at, s.name
