-- Prunes job_history a day at a time (docs/design.md "History"), for prune_jobs_v2 under its
-- try-lock. A day goes with DROP TABLE of its two partitions (its jobs and their tag rows): no
-- dead rows and nothing for vacuum.
--
-- * Retention (`p_cutoff` NULL): a day goes once the latest expiry in it has passed (one probe
--   of its expiry index, NULLs first), so a history job is kept at least its retention and at
--   most until every job of its day has expired. A day that holds a job kept for ever (expiry
--   NULL) is never dropped; its expired jobs are deleted one by one instead, up to `p_limit`,
--   oldest expiry first. An empty day before today goes too.
-- * `prune_jobs --older-than` (`p_cutoff` given): a day that ended at or before the cutoff goes
--   whole when `p_statuses` covers both statuses history holds; otherwise its jobs of those
--   statuses are deleted, up to `p_limit`. A day the cutoff falls inside is kept until it is
--   wholly older, so nothing finished after the cutoff is ever pruned.
--
-- DROP TABLE locks job_history out for an instant; `lock_timeout` keeps a long reader (an
-- export) from queueing every reader behind the drop: the prune fails and runs again later. The
-- caller's own lock_timeout is put back at the end (a caller's transaction may go on).
-- Returns how many jobs went.
CREATE FUNCTION workhorse._prune_history_v1(
    p_limit integer, p_cutoff timestamptz, p_statuses text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_day_name text;
    v_tags_name text;
    v_day date;
    v_found boolean;
    v_latest timestamptz;
    v_drop boolean;
    v_where text;
    v_count integer;
    v_total integer := 0;
    v_left integer := p_limit;
    v_lock_timeout text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', '2s', true);
    FOR v_day_name IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'workhorse.job_history'::regclass
        ORDER BY c.relname
    LOOP
        v_day := to_date(substr(v_day_name, length('job_history_p') + 1), 'YYYYMMDD');
        v_tags_name := 'job_history_tags_p' || to_char(v_day, 'YYYYMMDD');
        v_drop := false;
        v_where := NULL;
        IF p_cutoff IS NULL THEN
            v_found := NULL;
            EXECUTE format('SELECT true, expires_at FROM workhorse.%I'
                           ' ORDER BY expires_at DESC NULLS FIRST LIMIT 1', v_day_name)
                INTO v_found, v_latest;
            IF v_found IS NULL THEN
                v_drop := v_day < (now() AT TIME ZONE 'UTC')::date;
            ELSIF v_latest IS NOT NULL THEN
                v_drop := v_latest <= now();
            ELSE
                v_where := 'h.expires_at <= now() ORDER BY h.expires_at';
            END IF;
        ELSIF (v_day + 1)::timestamp AT TIME ZONE 'UTC' <= p_cutoff THEN
            IF p_statuses @> ARRAY['succeeded', 'expired'] THEN
                v_drop := true;
            ELSE
                v_where := 'h.status = ANY($1)';
            END IF;
        END IF;
        IF v_drop THEN
            EXECUTE format('SELECT count(*) FROM workhorse.%I', v_day_name) INTO v_count;
            EXECUTE format('DROP TABLE workhorse.%I', v_day_name);
            EXECUTE format('DROP TABLE IF EXISTS workhorse.%I', v_tags_name);
            v_total := v_total + v_count;
        ELSIF v_where IS NOT NULL AND v_left > 0 THEN
            EXECUTE format(
                'WITH gone AS ('
                '  DELETE FROM workhorse.%1$I WHERE id = ANY(ARRAY('
                '    SELECT h.id FROM workhorse.%1$I h WHERE %3$s LIMIT %4$s))'
                '  RETURNING id, tags'
                '), tags AS ('
                '  DELETE FROM workhorse.%2$I t'
                '  USING (SELECT g.id, x.tag FROM gone g'
                '         CROSS JOIN LATERAL unnest(g.tags) AS x(tag)) AS d'
                '  WHERE t.tag = d.tag AND t.job_id = d.id'
                ') SELECT count(*) FROM gone',
                v_day_name, v_tags_name, v_where, v_left) INTO v_count USING p_statuses;
            v_total := v_total + v_count;
            v_left := v_left - v_count;
        END IF;
    END LOOP;
    PERFORM set_config('lock_timeout', v_lock_timeout, true);
    RETURN v_total;
END
$$;
