-- Tell result waiters that these jobs reached a resting status: one NOTIFY per 1,000 ids (a
-- payload stays far below PostgreSQL's 8,000-byte limit). Delivered at commit.
CREATE FUNCTION workhorse._ended_v1(p_ids bigint[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_notify(workhorse.results_channel_v1(), c.ids)
    FROM (SELECT string_agg(t.id::text, ',') AS ids
          FROM unnest(p_ids) WITH ORDINALITY AS t(id, n)
          GROUP BY (t.n - 1) / 1000) AS c;
END
$$;
