-- The row trigger behind workflows (migrations/0002_0.3.0.sql, "workflows"): runs in the transaction that
-- changed a member's status, after the change.
--
-- * `succeeded`: noted (when the member has dependents) in the transaction-local setting
--   `workhorse.workflow_successes`; the release itself runs at commit, for all the
--   transaction's successes at once, in _workflow_release_v1 (a deferred constraint trigger),
--   so that the dependents' locks are taken in one order whatever order the successes were
--   recorded in (docs/design.md "Locks": two completions of parents of shared dependents never
--   deadlock).
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
    v_job record;
    v_ids bigint[];
    v_wf record;
    v_error jsonb;
    v_other record;
    v_at timestamptz := clock_timestamp();
BEGIN
    IF NEW.status = 'succeeded' THEN
        -- Released at commit, with every success of the transaction (_workflow_release_v1):
        -- here the member is only noted, when it has dependents (one probe), in a
        -- transaction-local setting.
        IF EXISTS (SELECT 1 FROM workhorse.job_deps d WHERE d.parent_id = NEW.id) THEN
            PERFORM set_config(
                'workhorse.workflow_successes',
                COALESCE(current_setting('workhorse.workflow_successes', true), '')
                    || NEW.id::text || ',',
                true);
        END IF;
        RETURN NULL;
    END IF;

    IF NEW.status IN ('failed', 'canceled', 'expired') THEN
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
            PERFORM workhorse._ended_v2(v_ids);
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
                 feature_level, cost, rate_cost, weight, budget, tags)
            VALUES (v_wf.on_error_task, v_wf.on_error_queue, COALESCE(v_wf.on_error_ckey, ''),
                    v_wf.on_error_priority,
                    jsonb_set(v_wf.on_error_payload, '{args}',
                              jsonb_build_array(NEW.id)
                              || COALESCE(v_wf.on_error_payload -> 'args', '[]'::jsonb)),
                    'ready', v_wf.on_error_max_attempts, v_wf.on_error_on_failure, 1,
                    v_wf.on_error_cost, v_wf.on_error_rate_cost, v_wf.on_error_weight,
                    v_wf.on_error_budget, v_wf.on_error_tags)
            RETURNING id, queue, ckey INTO v_job;
            INSERT INTO workhorse.job_tags (tag, job_id)
            SELECT x.tag, v_job.id FROM unnest(v_wf.on_error_tags) AS x(tag);
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
                WHERE d.job_id = ANY(v_ids) AND p.status IN ('failed', 'canceled', 'expired')
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
