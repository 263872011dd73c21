-- Send a signal to a job (docs/design.md "Signals"), in the caller's transaction: stored for the
-- job's waits (oldest first); with a key, stored once per (job, name, key), a repeat ignored. A
-- job suspended waiting for this signal becomes `ready` in this transaction (hinted, its claimers
-- woken). Returns 'delivered' (stored), or 'duplicate' (its key was seen). WH005 for a job that
-- does not exist or has finished.
CREATE FUNCTION workhorse.signal_v1(p_id bigint, p_name text, p_payload jsonb, p_key text)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_job workhorse.jobs%ROWTYPE;
    v_id bigint;
BEGIN
    SELECT * INTO v_job FROM workhorse.jobs j WHERE j.id = p_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % does not exist (or has been pruned): it cannot take a signal', p_id
            USING ERRCODE = 'WH005';
    END IF;
    IF v_job.status IN ('succeeded', 'failed', 'held', 'canceled', 'expired') THEN
        RAISE EXCEPTION 'job % has finished (%): it cannot take a signal', p_id, v_job.status
            USING ERRCODE = 'WH005';
    END IF;
    INSERT INTO workhorse.job_signals (job_id, name, signal_key, payload)
    VALUES (p_id, p_name, p_key, p_payload)
    ON CONFLICT (job_id, name, signal_key) WHERE signal_key IS NOT NULL DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        RETURN 'duplicate';
    END IF;
    IF NOT v_job.durable THEN
        -- Its signals go with it when it is pruned, so it stays where the pruner finds them.
        UPDATE workhorse.jobs j SET durable = true WHERE j.id = p_id;
    END IF;
    IF v_job.status = 'suspended' AND v_job.suspended_on = 'signal'
       AND EXISTS (SELECT 1 FROM workhorse.job_steps s
                   WHERE s.job_id = p_id AND s.recorded_at IS NULL AND s.kind = 'wait'
                     AND s.signal = p_name) THEN
        UPDATE workhorse.jobs j SET status = 'ready', suspended_on = NULL, wake_at = NULL
        WHERE j.id = p_id;
        PERFORM workhorse._hint_keys_v2(v_job.queue, ARRAY[v_job.ckey]);
        PERFORM workhorse._wake_v1(v_job.queue);
    END IF;
    RETURN 'delivered';
END
$$;
