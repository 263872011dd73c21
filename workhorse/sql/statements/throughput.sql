-- The last %(minutes)s minutes of fleet counters (at most that many rows, through the primary
-- key), and the database clock, so that the current, partial minute is divided by its elapsed
-- seconds only.
SELECT t.minute, t.claimed, t.succeeded, t.failed, t.retried, t.held, t.canceled,
       clock_timestamp() AS now
FROM workhorse.throughput t
WHERE t.minute > date_trunc('minute', clock_timestamp()) - make_interval(mins => %(minutes)s)
ORDER BY t.minute
