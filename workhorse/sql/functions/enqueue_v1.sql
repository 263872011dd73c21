-- Enqueue a batch in one statement. Arrays are parallel; ids come back in input order.
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
    p_metas text[]
) RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queue text;
BEGIN
    -- Sorted, so that two multi-queue enqueues and an install take the gates in one order.
    FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues) AS q ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock_shared(workhorse._enqueue_gate_id_v1(v_queue));
    END LOOP;

    -- A new statement, so the policy read behind the hints sees any install that finished while we
    -- waited at the gate.
    RETURN QUERY
    WITH input AS (
        SELECT t.*,
               COALESCE(t.run_at, now() + make_interval(secs => COALESCE(t.delay, 0))) AS due
        FROM unnest(p_tasks, p_queues, p_ckeys, p_priorities, p_payloads, p_run_ats, p_delays,
                    p_max_attempts, p_on_failures, p_metas)
             WITH ORDINALITY
             AS t(task, queue, ckey, priority, payload, run_at, delay, max_attempts, on_failure,
                  meta, ord)
    ), inserted AS (
        INSERT INTO workhorse.jobs
            (task, queue, ckey, priority, payload, status, max_attempts, on_failure, run_at, meta)
        SELECT task, queue, COALESCE(ckey, ''), priority, payload::jsonb,
               CASE WHEN due > now() THEN 'scheduled' ELSE 'ready' END,
               max_attempts, on_failure, due, COALESCE(meta, '{}')::jsonb
        FROM input
        ORDER BY ord
        RETURNING id, queue, ckey, status
    ), hinted AS (
        INSERT INTO workhorse.key_hints (queue, ckey)
        SELECT DISTINCT i.queue, i.ckey
        FROM inserted i
        JOIN (SELECT DISTINCT q FROM unnest(p_queues) AS q) AS keyed
          ON keyed.q = i.queue AND workhorse._keyed_v1(keyed.q)
        WHERE i.ckey <> '' AND i.status = 'ready'
    )
    SELECT id FROM inserted ORDER BY id;

    FOR v_queue IN SELECT DISTINCT q FROM unnest(p_queues) AS q LOOP
        PERFORM workhorse._wake_v1(v_queue);
    END LOOP;
END
$$;
