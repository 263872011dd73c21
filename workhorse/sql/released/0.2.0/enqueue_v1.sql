-- Enqueue a batch in one statement. Arrays are parallel; ids come back in input order.
-- A job with an idempotency key is inserted only while no job of the same task has that key:
-- otherwise its id is that job's (the unique index decides, so concurrent enqueues of one key
-- make one job; an uncommitted one makes the second wait, as any unique index does). The same
-- key twice in one batch gives the first one's id twice.
-- `p_feature_levels` (NULL: every job level 1) is the feature level each job needs; a job above
-- level 1 raises its queue's level in queue_levels, in this transaction, so that no claim of a
-- lower level sees the job without seeing its queue's level too.
CREATE FUNCTION workhorse.enqueue_v1(
    p_tasks text[],
    p_queues text[],
    p_ckeys text[],
    p_priorities smallint[],
    p_payloads text[],
    p_run_ats timestamptz[],
    p_delays double precision[],
    p_max_attempts integer[],
    p_on_failures text[],
    p_metas text[],
    p_idempotency_keys text[],
    p_feature_levels smallint[] DEFAULT NULL
) RETURNS TABLE (id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_queue text;
    v_inserted bigint[];
BEGIN
    -- Sorted, so that two multi-queue enqueues and an install take the gates in one order.
    FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues) AS q ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock_shared(workhorse._enqueue_gate_id_v1(v_queue));
    END LOOP;

    IF p_feature_levels IS NOT NULL THEN
        -- Raised before the jobs exist, and never lowered: a queue that used a feature keeps
        -- the claims that do not know it away.
        INSERT INTO workhorse.queue_levels AS lv (queue, feature_level)
        SELECT t.queue, max(t.level)
        FROM unnest(p_queues, p_feature_levels) AS t(queue, level)
        WHERE t.level > 1
        GROUP BY t.queue
        ORDER BY t.queue
        ON CONFLICT (queue) DO UPDATE SET feature_level = excluded.feature_level
            WHERE lv.feature_level < excluded.feature_level;
    END IF;

    -- A new statement, so the policy read behind the hints sees any install that finished while we
    -- waited at the gate.
    WITH input AS (
        SELECT t.*,
               COALESCE(t.run_at, now() + make_interval(secs => COALESCE(t.delay, 0))) AS due
        FROM unnest(p_tasks, p_queues, p_ckeys, p_priorities, p_payloads, p_run_ats, p_delays,
                    p_max_attempts, p_on_failures, p_metas, p_idempotency_keys,
                    p_feature_levels)
             WITH ORDINALITY
             AS t(task, queue, ckey, priority, payload, run_at, delay, max_attempts, on_failure,
                  meta, idem, level, ord)
    ), inserted AS (
        INSERT INTO workhorse.jobs
            (task, queue, ckey, priority, payload, status, max_attempts, on_failure, run_at, meta,
             idempotency_key, feature_level)
        SELECT i.task, i.queue, COALESCE(i.ckey, ''), i.priority, i.payload::jsonb,
               CASE WHEN i.due > now() THEN 'scheduled' ELSE 'ready' END,
               i.max_attempts, i.on_failure, i.due, COALESCE(i.meta, '{}')::jsonb, i.idem,
               COALESCE(i.level, 1)
        FROM input i
        ORDER BY i.ord
        ON CONFLICT (task, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id, queue, ckey, status
    ), hinted AS (
        INSERT INTO workhorse.key_hints (queue, ckey)
        SELECT DISTINCT i.queue, i.ckey
        FROM inserted i
        JOIN (SELECT DISTINCT q FROM unnest(p_queues) AS q) AS keyed
          ON keyed.q = i.queue AND workhorse._keyed_v1(keyed.q)
        WHERE i.ckey <> '' AND i.status = 'ready'
    )
    SELECT array_agg(ins.id ORDER BY ins.id) INTO v_inserted FROM inserted ins;

    FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues) AS q LOOP
        PERFORM workhorse._wake_v1(v_queue);
    END LOOP;

    IF p_idempotency_keys IS NULL
       OR NOT EXISTS (SELECT 1 FROM unnest(p_idempotency_keys) AS k WHERE k IS NOT NULL) THEN
        -- Every row was inserted, and ids follow input order.
        RETURN QUERY SELECT unnest(COALESCE(v_inserted, '{}'));
        RETURN;
    END IF;
    -- Keyed rows take the id their key has now (ours, or the job that was there first); the
    -- others take the inserted ids of keyless rows in order (ids follow insertion order).
    RETURN QUERY
    WITH input AS (
        SELECT t.task, t.idem, t.ord,
               count(*) FILTER (WHERE t.idem IS NULL) OVER (ORDER BY t.ord) AS nth_keyless
        FROM unnest(p_tasks, p_idempotency_keys) WITH ORDINALITY AS t(task, idem, ord)
    ), keyless AS (
        SELECT v.id, row_number() OVER (ORDER BY v.id) AS nth
        FROM unnest(COALESCE(v_inserted, '{}')) AS v(id)
        JOIN workhorse.jobs j ON j.id = v.id
        WHERE j.idempotency_key IS NULL
    )
    SELECT CASE WHEN i.idem IS NULL THEN k.id
                ELSE (SELECT j.id FROM workhorse.jobs j
                      WHERE j.task = i.task AND j.idempotency_key = i.idem) END
    FROM input i
    LEFT JOIN keyless k ON i.idem IS NULL AND k.nth = i.nth_keyless
    ORDER BY i.ord;
END
$$;
