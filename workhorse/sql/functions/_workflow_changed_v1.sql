-- The row trigger behind workflows (migrations/0006_workflows.sql): runs in the transaction that
-- changed a member's status, after the change.
--
-- * `succeeded`: each dependent's pending count goes down by one, under the dependent's
--   workflow_members row lock (taken in (queue, job id) order). The update that brings it to 0
--   releases it, exactly as an enqueue makes a job: its parents' results filled in, `ready` (or
--   `scheduled` with a delay), its key hinted on a keyed queue, its queue's claimers woken at
--   commit. Two parents that succeed at once serialize on that row, so one of them, and only
--   one, sees 0. Filled-in arguments above the payload limit fail the dependent with
--   PayloadError instead (which cancels its own dependents, through this trigger).
-- * `failed`, `canceled`: every waiting member downstream becomes `canceled` with
--   DependencyFailedError naming this member (locked in (queue, id) order), its expiry fixed
--   from its own task's retention (workflow_members.retention); `failed` or `held`
--   also enqueues the workflow's on_error signature, once per workflow.
-- * back to `ready` or `scheduled` from `failed` or `canceled` (a retry): the members downstream
--   that were canceled for this member go back to `waiting`, their pending counts recounted; one
--   with another parent still failed or canceled is canceled again for that parent.
-- * `held`: nothing downstream changes (its dependents keep waiting).
CREATE FUNCTION workhorse._workflow_changed_v1() RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_child record;
    v_pending integer;
    v_job record;
    v_filled jsonb;
    v_payload jsonb;
    v_due timestamptz;
    v_status text;
    v_ids bigint[];
    v_wf record;
    v_error jsonb;
    v_other record;
    v_at timestamptz := clock_timestamp();
BEGIN
    IF NEW.status = 'succeeded' THEN
        FOR v_child IN
            SELECT d.job_id, j.queue
            FROM workhorse.job_deps d
            JOIN workhorse.jobs j ON j.id = d.job_id
            WHERE d.parent_id = NEW.id
            ORDER BY j.queue, d.job_id
        LOOP
            UPDATE workhorse.workflow_members m SET pending = m.pending - 1
            WHERE m.job_id = v_child.job_id AND m.pending > 0
            RETURNING m.pending INTO v_pending;
            CONTINUE WHEN NOT FOUND OR v_pending <> 0;
            SELECT j.id, j.status, j.queue, j.ckey, j.payload, m.mode, m.delay, m.run_at
            INTO v_job
            FROM workhorse.jobs j JOIN workhorse.workflow_members m ON m.job_id = j.id
            WHERE j.id = v_child.job_id
            FOR UPDATE OF j;
            CONTINUE WHEN v_job.status IS DISTINCT FROM 'waiting';
            v_payload := v_job.payload;
            IF v_job.mode <> 'none' THEN
                SELECT CASE WHEN v_job.mode = 'one'
                            THEN (array_agg(COALESCE(CASE WHEN p.id = NEW.id THEN NEW.result
                                                          ELSE p.result END, 'null'::jsonb)
                                            ORDER BY d.position))[1]
                            ELSE COALESCE(jsonb_agg(COALESCE(CASE WHEN p.id = NEW.id
                                                                  THEN NEW.result
                                                                  ELSE p.result END,
                                                             'null'::jsonb)
                                                    ORDER BY d.position), '[]'::jsonb)
                       END
                INTO v_filled
                FROM workhorse.job_deps d JOIN workhorse.jobs p ON p.id = d.parent_id
                WHERE d.job_id = v_job.id AND d.passes;
                v_payload := jsonb_set(v_payload, '{args}',
                                       jsonb_build_array(v_filled)
                                       || COALESCE(v_payload -> 'args', '[]'::jsonb));
            END IF;
            UPDATE workhorse.workflow_members m SET releases = m.releases + 1
            WHERE m.job_id = v_job.id;
            IF octet_length(v_payload::text) > 1048576 THEN
                UPDATE workhorse.jobs j
                SET status = 'failed', finished_at = v_at,
                    expires_at = workhorse._expiry_v1('failed', m.retention, v_at),
                    error = jsonb_build_object(
                        'type', 'PayloadError',
                        'message', format('the arguments filled in at release are %s bytes, '
                                          'above the payload limit of 1048576',
                                          octet_length(v_payload::text)),
                        'traceback', NULL)
                FROM workhorse.workflow_members m
                WHERE j.id = v_job.id AND m.job_id = j.id;
                PERFORM workhorse._ended_v1(ARRAY[v_job.id]);
                CONTINUE;
            END IF;
            v_due := COALESCE(v_job.run_at,
                              now() + make_interval(secs => COALESCE(v_job.delay, 0)));
            UPDATE workhorse.jobs j
            SET payload = v_payload, run_at = v_due,
                status = CASE WHEN v_due > now() THEN 'scheduled' ELSE 'ready' END
            WHERE j.id = v_job.id
            RETURNING j.status INTO v_status;
            IF v_status = 'ready' AND v_job.ckey <> '' AND workhorse._keyed_v2(v_job.queue) THEN
                INSERT INTO workhorse.key_hints (queue, ckey) VALUES (v_job.queue, v_job.ckey);
            END IF;
            PERFORM workhorse._wake_v1(v_job.queue);
        END LOOP;
        RETURN NULL;
    END IF;

    IF NEW.status IN ('failed', 'canceled') THEN
        v_error := jsonb_build_object(
            'type', 'DependencyFailedError',
            'message', format('job %s (%s), which it depends on, ended %s',
                              NEW.id, NEW.task, NEW.status),
            'traceback', NULL,
            'dependency', NEW.id);
        WITH RECURSIVE down(id) AS (
            SELECT d.job_id FROM workhorse.job_deps d
            JOIN workhorse.jobs j ON j.id = d.job_id AND j.status = 'waiting'
            WHERE d.parent_id = NEW.id
            UNION
            SELECT d.job_id FROM down
            JOIN workhorse.job_deps d ON d.parent_id = down.id
            JOIN workhorse.jobs j ON j.id = d.job_id AND j.status = 'waiting'
        ), locked AS (
            SELECT j.id FROM workhorse.jobs j
            WHERE j.id IN (SELECT id FROM down) AND j.status = 'waiting'
            ORDER BY j.queue, j.id
            FOR UPDATE
        )
        SELECT array_agg(id) INTO v_ids FROM locked;
        IF v_ids IS NOT NULL THEN
            UPDATE workhorse.jobs j
            SET status = 'canceled', finished_at = v_at, error = v_error,
                expires_at = workhorse._expiry_v1('canceled', m.retention, v_at)
            FROM workhorse.workflow_members m
            WHERE j.id = ANY(v_ids) AND j.status = 'waiting' AND m.job_id = j.id;
            PERFORM workhorse._ended_v1(v_ids);
        END IF;
    END IF;

    IF NEW.status IN ('failed', 'held') THEN
        UPDATE workhorse.workflows w SET on_error_job = -1
        WHERE w.id = NEW.workflow_id AND w.on_error_task IS NOT NULL AND w.on_error_job IS NULL
        RETURNING w.* INTO v_wf;
        IF FOUND THEN
            PERFORM pg_advisory_xact_lock_shared(workhorse._enqueue_gate_id_v1(v_wf.on_error_queue));
            INSERT INTO workhorse.jobs
                (task, queue, ckey, priority, payload, status, max_attempts, on_failure,
                 feature_level, cost, rate_cost, weight)
            VALUES (v_wf.on_error_task, v_wf.on_error_queue, COALESCE(v_wf.on_error_ckey, ''),
                    v_wf.on_error_priority,
                    jsonb_set(v_wf.on_error_payload, '{args}',
                              jsonb_build_array(NEW.id)
                              || COALESCE(v_wf.on_error_payload -> 'args', '[]'::jsonb)),
                    'ready', v_wf.on_error_max_attempts, v_wf.on_error_on_failure, 1,
                    v_wf.on_error_cost, v_wf.on_error_rate_cost, v_wf.on_error_weight)
            RETURNING id, queue, ckey INTO v_job;
            UPDATE workhorse.workflows w SET on_error_job = v_job.id WHERE w.id = NEW.workflow_id;
            IF v_job.ckey <> '' AND workhorse._keyed_v2(v_job.queue) THEN
                INSERT INTO workhorse.key_hints (queue, ckey) VALUES (v_job.queue, v_job.ckey);
            END IF;
            PERFORM workhorse._wake_v1(v_job.queue);
        END IF;
        RETURN NULL;
    END IF;

    IF NEW.status IN ('ready', 'scheduled') AND OLD.status IN ('failed', 'canceled') THEN
        WITH RECURSIVE down(id) AS (
            SELECT d.job_id FROM workhorse.job_deps d
            JOIN workhorse.jobs j ON j.id = d.job_id AND j.status = 'canceled'
                 AND j.error ->> 'type' = 'DependencyFailedError'
                 AND (j.error ->> 'dependency')::bigint = NEW.id
            WHERE d.parent_id = NEW.id
            UNION
            SELECT d.job_id FROM down
            JOIN workhorse.job_deps d ON d.parent_id = down.id
            JOIN workhorse.jobs j ON j.id = d.job_id AND j.status = 'canceled'
                 AND j.error ->> 'type' = 'DependencyFailedError'
                 AND (j.error ->> 'dependency')::bigint = NEW.id
        ), locked AS (
            SELECT j.id FROM workhorse.jobs j
            WHERE j.id IN (SELECT id FROM down)
            ORDER BY j.queue, j.id
            FOR UPDATE
        )
        SELECT array_agg(id) INTO v_ids FROM locked;
        IF v_ids IS NOT NULL THEN
            UPDATE workhorse.jobs j
            SET status = 'waiting', finished_at = NULL, error = NULL, expires_at = NULL
            WHERE j.id = ANY(v_ids);
            UPDATE workhorse.workflow_members m
            SET pending = (SELECT count(*) FROM workhorse.job_deps d
                           JOIN workhorse.jobs p ON p.id = d.parent_id
                           WHERE d.job_id = m.job_id AND p.status <> 'succeeded')
            WHERE m.job_id = ANY(v_ids);
            -- Another parent still failed or canceled: canceled again, for that parent.
            FOR v_other IN
                SELECT DISTINCT ON (d.job_id) d.job_id, p.id AS parent, p.task, p.status
                FROM workhorse.job_deps d JOIN workhorse.jobs p ON p.id = d.parent_id
                WHERE d.job_id = ANY(v_ids) AND p.status IN ('failed', 'canceled')
                ORDER BY d.job_id, p.id
            LOOP
                UPDATE workhorse.jobs j
                SET status = 'canceled', finished_at = v_at,
                    expires_at = workhorse._expiry_v1('canceled', m.retention, v_at),
                    error = jsonb_build_object(
                        'type', 'DependencyFailedError',
                        'message', format('job %s (%s), which it depends on, ended %s',
                                          v_other.parent, v_other.task, v_other.status),
                        'traceback', NULL, 'dependency', v_other.parent)
                FROM workhorse.workflow_members m
                WHERE j.id = v_other.job_id AND j.status = 'waiting' AND m.job_id = j.id;
            END LOOP;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
