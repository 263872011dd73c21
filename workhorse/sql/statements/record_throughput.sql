-- A supervisor's counter deltas since its last tick, added to the current minute's row; rows
-- older than a day go in the same statement (a handful of rows, through the primary key).
WITH pruned AS (
    DELETE FROM workhorse.throughput
    WHERE minute < date_trunc('minute', now()) - interval '1 day'
)
INSERT INTO workhorse.throughput AS t (minute, claimed, succeeded, failed, retried, held, canceled)
VALUES (date_trunc('minute', now()), %(claimed)s, %(succeeded)s, %(failed)s, %(retried)s,
        %(held)s, %(canceled)s)
ON CONFLICT (minute) DO UPDATE
SET claimed = t.claimed + EXCLUDED.claimed,
    succeeded = t.succeeded + EXCLUDED.succeeded,
    failed = t.failed + EXCLUDED.failed,
    retried = t.retried + EXCLUDED.retried,
    held = t.held + EXCLUDED.held,
    canceled = t.canceled + EXCLUDED.canceled
