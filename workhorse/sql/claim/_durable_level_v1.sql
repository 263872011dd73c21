-- A queue whose job records a step, suspends or adopts children is at feature level 2 from then
-- on (docs/design.md "Feature levels"): a 0.2.0 claim would run such a job without its steps,
-- and a 0.2.0 outcome would not wake a child's parent. Raised once per queue (read first: a
-- write per step would cost every step a row lock), never lowered.
CREATE FUNCTION workhorse._durable_level_v1(p_queue text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM workhorse.queue_levels lv
                   WHERE lv.queue = p_queue AND lv.feature_level >= 2) THEN
        INSERT INTO workhorse.queue_levels AS lv (queue, feature_level) VALUES (p_queue, 2)
        ON CONFLICT (queue) DO UPDATE SET feature_level = 2 WHERE lv.feature_level < 2;
    END IF;
END
$$;
