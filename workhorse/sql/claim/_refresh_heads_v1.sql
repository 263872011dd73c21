-- Set each key's head to its best ready job, or drop the head when the key has none. The heads
-- to drop are named by key (`ckey = ANY(...)`), never joined with the refreshed keys: a join
-- estimated at one row walks every head of the queue and scans the keys for each. PG 18 looks
-- the keys up in key_heads_pkey; PG 15, with statistics that say the queue has one head, may
-- read its heads but only tests each key against the list.
CREATE FUNCTION workhorse._refresh_heads_v1(p_queue text, p_keys text[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF COALESCE(cardinality(p_keys), 0) = 0 THEN
        RETURN;  -- nothing to refresh
    END IF;
    WITH keys AS (
        SELECT DISTINCT k AS ckey FROM unnest(p_keys) AS k WHERE k <> ''
    ), heads AS (
        SELECT keys.ckey, best.rank, best.id
        FROM keys
        LEFT JOIN LATERAL (
            SELECT j.rank, j.id FROM workhorse.jobs j
            WHERE j.queue = p_queue AND j.ckey = keys.ckey AND j.status = 'ready'
            ORDER BY j.queue, j.ckey, j.rank, j.id
            LIMIT 1
        ) AS best ON true
    ), dropped AS (
        DELETE FROM workhorse.key_heads kh
        WHERE kh.queue = p_queue
          AND kh.ckey = ANY(ARRAY(SELECT h.ckey FROM heads h WHERE h.id IS NULL))
    )
    INSERT INTO workhorse.key_heads AS kh (queue, ckey, head_rank, head_id)
    SELECT p_queue, heads.ckey, heads.rank, heads.id FROM heads WHERE heads.id IS NOT NULL
    ON CONFLICT (queue, ckey) DO UPDATE
        SET head_rank = excluded.head_rank, head_id = excluded.head_id
        WHERE (kh.head_rank, kh.head_id) IS DISTINCT FROM (excluded.head_rank, excluded.head_id);
END
$$;
