-- An adaptive budget's effective max_active at `p_now` (docs/design.md "Back-pressure"): its
-- last backoff halved it to `p_halved`; it stays there until a quiet `p_quiet` seconds have
-- passed since the backoff's end `p_until`, then grows by one unit per further `p_quiet`, back
-- to `p_max`, the max_active in force. NULL `p_halved`: not halved, `p_max`. (SQL, immutable:
-- inlined into the statements that call it.)
CREATE FUNCTION workhorse._adaptive_max_v1(
    p_max integer, p_halved integer, p_until timestamptz, p_quiet double precision,
    p_now timestamptz)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN p_halved IS NULL OR p_max IS NULL THEN p_max
                ELSE LEAST(p_max, p_halved + GREATEST(
                    0, floor(EXTRACT(epoch FROM p_now - p_until) / p_quiet))::integer)
           END
$$;
