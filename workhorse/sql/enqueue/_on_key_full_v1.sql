-- After an enqueue inserted `p_ids`: for each of them (in id order, so the newest of a batch
-- wins) that has a key, in one of `p_queues` (the queues whose admission lock the enqueue took,
-- before its enqueue gates, because their policy said on_key_full), act on a full key
-- (docs/design.md "Job keys"). A key is full for the new job when the cost of its active jobs, plus
-- that of its other pending (scheduled, ready) jobs, plus the new job's, exceeds the key's limit
-- in force: its own (key_limits), else its queue's default, else max_active_per_key.
-- * 'cancel_newest': the new job is canceled at once.
-- * 'cancel_in_progress': the key's older pending jobs are canceled, and its oldest active jobs
--   that were not asked yet get cancel requests until what stays active leaves room for the new
--   one. A job asked to cancel ends `canceled` and records no result (its fence check refuses a
--   success once the request is seen; docs/design.md "Results and control"), and it holds its
--   capacity until its handler has stopped, so the new job starts only after that.
-- Holding the admission lock, this serializes with the key's claims: no claim admits a job of
-- the key between the count and the cancels. `p_retention` fixes the expiry of what it cancels.
CREATE FUNCTION workhorse._on_key_full_v1(p_queues text[], p_ids bigint[], p_retention text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
DECLARE
    v_job record;
    v_mode text;
    v_per_key integer;
    v_active bigint;
    v_pending bigint;
    v_keep bigint;
    v_cancel bigint[];
    v_now timestamptz;
BEGIN
    FOR v_job IN
        SELECT j.id, j.queue, j.ckey, j.cost
        FROM workhorse.jobs j
        WHERE j.id = ANY(p_ids) AND j.queue = ANY(p_queues) AND j.ckey <> ''
          AND j.status IN ('scheduled', 'ready')
        ORDER BY j.id
    LOOP
        SELECT p.on_key_full INTO v_mode FROM workhorse.policies p WHERE p.queue = v_job.queue;
        -- The key's own limit, else its set's default, else the per-key limit in force
        -- (docs/design.md "Per-key limits").
        v_per_key := COALESCE(
            (SELECT k.max_active FROM workhorse.key_limits k
             WHERE k.queue = v_job.queue AND k.ckey = v_job.ckey),
            (SELECT s.default_max_active FROM workhorse.key_limit_sets s
             WHERE s.queue = v_job.queue),
            (workhorse._limits_v1(v_job.queue, clock_timestamp())).max_active_per_key);
        CONTINUE WHEN v_mode IS NULL OR v_mode = 'queue' OR v_per_key IS NULL;
        v_now := clock_timestamp();
        SELECT COALESCE(sum(j.cost), 0) INTO v_active
        FROM workhorse.jobs j
        WHERE j.queue = v_job.queue AND j.status = 'active' AND j.lease_until > v_now
          AND j.ckey = v_job.ckey;
        -- Pending beyond the limit only has to be seen, not counted whole.
        SELECT COALESCE(sum(x.cost), 0) INTO v_pending
        FROM (SELECT j.cost FROM workhorse.jobs j
              WHERE j.queue = v_job.queue AND j.ckey = v_job.ckey AND j.status = 'ready'
                AND j.id <> v_job.id
              LIMIT v_per_key + 1) AS x;
        SELECT v_pending + COALESCE(sum(x.cost), 0) INTO v_pending
        FROM (SELECT j.cost FROM workhorse.jobs j
              WHERE j.queue = v_job.queue AND j.ckey = v_job.ckey AND j.status = 'scheduled'
                AND j.ckey <> '' AND j.id <> v_job.id
              LIMIT v_per_key + 1) AS x;
        CONTINUE WHEN v_active + v_pending + v_job.cost <= v_per_key;
        IF v_mode = 'cancel_newest' THEN
            PERFORM workhorse.cancel_jobs_v2(ARRAY[v_job.id], p_retention);
            CONTINUE;
        END IF;
        -- The newest wins: every older pending job of the key goes, ...
        v_cancel := ARRAY(
            SELECT j.id FROM workhorse.jobs j
            WHERE j.queue = v_job.queue AND j.ckey = v_job.ckey AND j.status = 'ready'
              AND j.id < v_job.id
            UNION ALL
            SELECT j.id FROM workhorse.jobs j
            WHERE j.queue = v_job.queue AND j.ckey = v_job.ckey AND j.status = 'scheduled'
              AND j.ckey <> '' AND j.id < v_job.id);
        -- ... and the oldest active ones not asked yet, until what stays leaves room for it.
        v_keep := v_per_key - v_job.cost;
        v_cancel := v_cancel || ARRAY(
            SELECT a.id FROM (
                SELECT j.id,
                       sum(j.cost) OVER (ORDER BY j.id DESC) AS newer_and_me
                FROM workhorse.jobs j
                WHERE j.queue = v_job.queue AND j.status = 'active' AND j.lease_until > v_now
                  AND j.ckey = v_job.ckey AND j.cancel_requested_at IS NULL) AS a
            WHERE a.newer_and_me > v_keep);
        IF cardinality(v_cancel) > 0 THEN
            PERFORM workhorse.cancel_jobs_v2(v_cancel, p_retention);
        END IF;
    END LOOP;
END
$$;
