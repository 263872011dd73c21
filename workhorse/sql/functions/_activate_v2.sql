-- Activate chosen jobs as _activate_v1 does (a new fence, one more attempt, a lease from the
-- clock), and record their starts for the rate limits in force: the queue's scope when
-- p_queue_period is given, each key's when p_key_period is. A start is filed in the bucket that
-- ends at or after its own started_at (1/100 of the period wide).
CREATE FUNCTION workhorse._activate_v2(
    p_ids bigint[], p_lease double precision, p_now timestamptz,
    p_queue_period double precision, p_key_period double precision)
RETURNS SETOF workhorse.jobs
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN QUERY
        WITH activated AS (
            UPDATE workhorse.jobs j
            SET status = 'active',
                attempts = j.attempts + 1,
                fence = nextval('workhorse.fence_seq'),
                lease_until = clock_timestamp() + make_interval(secs => p_lease),
                started_at = clock_timestamp()
            WHERE j.id = ANY(p_ids)
              AND (j.status = 'ready' OR (j.status = 'active' AND j.lease_until <= p_now))
            RETURNING j.*
        ), scopes AS (
            SELECT a.queue, '' AS ckey, p_queue_period AS period, max(a.started_at) AS at,
                   count(*)::integer AS n
            FROM activated a
            WHERE p_queue_period IS NOT NULL
            GROUP BY a.queue
            UNION ALL
            SELECT a.queue, a.ckey, p_key_period, max(a.started_at), count(*)::integer
            FROM activated a
            WHERE p_key_period IS NOT NULL AND a.ckey <> ''
            GROUP BY a.queue, a.ckey
        ), recorded AS (
            INSERT INTO workhorse.rate_starts AS r (queue, ckey, bucket_end, n)
            SELECT s.queue, s.ckey,
                   to_timestamp(ceil(EXTRACT(epoch FROM s.at)::double precision
                                     / (s.period / 100)) * (s.period / 100)),
                   s.n
            FROM scopes s
            ON CONFLICT (queue, ckey, bucket_end) DO UPDATE SET n = r.n + excluded.n
        )
        SELECT * FROM activated;
END
$$;
