-- The limits in force on a queue at p_now: its policy, with an unexpired override's fields in
-- place of the policy's, and whether it is paused. `governed` is true when the queue has a policy
-- or a control row: its claims then serialize on the admission lock. `feature_level` is the
-- highest level the queue's policy and its jobs have used (1 when neither says more): a claim
-- of a lower level admits nothing there.
-- PL/pgSQL, not SQL: its statement's plan is cached, where a SQL function called in FROM is
-- planned again on every claim.
CREATE FUNCTION workhorse._limits_v1(
    p_queue text, p_now timestamptz,
    OUT governed boolean, OUT paused boolean,
    OUT max_active integer, OUT max_active_per_key integer,
    OUT rate_limit integer, OUT rate_period double precision,
    OUT rate_limit_per_key integer, OUT rate_period_per_key double precision,
    OUT feature_level integer)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    SELECT p.queue IS NOT NULL OR c.queue IS NOT NULL,
           COALESCE(c.paused, false),
           COALESCE(o.max_active, p.max_active),
           COALESCE(o.max_active_per_key, p.max_active_per_key),
           COALESCE(o.rate_limit, p.rate_limit),
           CASE WHEN o.rate_limit IS NOT NULL THEN o.rate_period ELSE p.rate_period END,
           COALESCE(o.rate_limit_per_key, p.rate_limit_per_key),
           CASE WHEN o.rate_limit_per_key IS NOT NULL THEN o.rate_period_per_key
                ELSE p.rate_period_per_key END,
           GREATEST(COALESCE(p.feature_level, 1), COALESCE(lv.feature_level, 1))
    INTO governed, paused, max_active, max_active_per_key, rate_limit, rate_period,
         rate_limit_per_key, rate_period_per_key, feature_level
    FROM (SELECT p_queue AS queue) AS q
    LEFT JOIN workhorse.policies p ON p.queue = q.queue
    LEFT JOIN workhorse.queue_controls c ON c.queue = q.queue
    LEFT JOIN workhorse.queue_levels lv ON lv.queue = q.queue
    LEFT JOIN LATERAL (
        SELECT c.max_active, c.max_active_per_key, c.rate_limit, c.rate_period,
               c.rate_limit_per_key, c.rate_period_per_key
        WHERE c.override_expires_at IS NULL OR c.override_expires_at > p_now
    ) AS o ON true;
END
$$;
