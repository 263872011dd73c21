-- The release of workflow members (docs/design.md "Workflows", invariant 11): a deferred constraint
-- trigger (migrations/0002_0.3.0.sql) on a member's success, so it runs at commit, in the
-- transaction that recorded the success. Its first call in a commit takes every success the row
-- trigger (_workflow_changed_v1) noted in `workhorse.workflow_successes` and clears the setting;
-- the later calls of the same commit find it empty and return at once.
--
-- Locks, in one order (docs/design.md "Locks": by queue name, then job id): the dependents of all the
-- transaction's successes are locked FOR UPDATE in (queue, id) order, each before it is read
-- or changed; their workflow_members rows are changed only under that lock.
-- A dependent is taken at commit, after every queue lock the transaction took (a claim's), so two
-- transactions that complete parents of shared dependents in opposite orders (a worker's batch
-- of successes, or one statement at a time) wait for each other at most, and never deadlock.
--
-- For each dependent: its pending count goes down by the number of its parents among these
-- successes (parents still `succeeded` now: a success undone later in the same transaction
-- releases nothing). The update that brings it to 0 releases it, exactly as an enqueue makes a
-- job: its parents' results filled in, `ready` (or `scheduled` with a delay), its key hinted on
-- a keyed queue, its queue's claimers woken at commit. Two transactions whose last successes
-- come at once serialize on the dependent's row lock, so one of them, and only one, sees 0.
-- Filled-in arguments above the payload limit fail the dependent with PayloadError instead (its
-- expiry from its task's retention), which cancels its own dependents through the row trigger.
CREATE FUNCTION workhorse._workflow_release_v1() RETURNS trigger
LANGUAGE plpgsql VOLATILE
-- Generic plans, made once a session (as enqueue_v2's): the statements take arrays the planner
-- cannot see into, and planning them again at every call cost more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_noted text := current_setting('workhorse.workflow_successes', true);
    v_parents bigint[];
    v_child record;
    v_pending integer;
    v_job record;
    v_filled jsonb;
    v_payload jsonb;
    v_due timestamptz;
    v_status text;
    v_at timestamptz := clock_timestamp();
BEGIN
    IF v_noted IS NULL OR v_noted = '' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('workhorse.workflow_successes', '', true);
    -- A parent noted twice (it succeeded, was retried and succeeded again in this transaction)
    -- counts once: the statements below take the ids through `= ANY`.
    v_parents := string_to_array(rtrim(v_noted, ','), ',')::bigint[];

    -- Every dependent, locked in (queue, id) order (the rows are sorted first, then locked one
    -- by one as the loop takes them), with the number of its parents among these successes.
    FOR v_child IN
        SELECT j.id AS job_id,
               (SELECT count(*) FROM workhorse.job_deps d
                JOIN workhorse.jobs p ON p.id = d.parent_id AND p.status = 'succeeded'
                WHERE d.job_id = j.id AND d.parent_id = ANY(v_parents))::integer AS n
        FROM workhorse.jobs j
        WHERE j.id = ANY(ARRAY(SELECT d.job_id FROM workhorse.job_deps d
                               WHERE d.parent_id = ANY(v_parents)))
        ORDER BY j.queue, j.id
        FOR UPDATE OF j
    LOOP
        CONTINUE WHEN v_child.n = 0;
        UPDATE workhorse.workflow_members m SET pending = GREATEST(m.pending - v_child.n, 0)
        WHERE m.job_id = v_child.job_id AND m.pending > 0
        RETURNING m.pending INTO v_pending;
        CONTINUE WHEN NOT FOUND OR v_pending <> 0;
        SELECT j.id, j.status, j.queue, j.ckey, j.payload, m.mode, m.delay, m.run_at,
               m.retention
        INTO v_job
        FROM workhorse.jobs j JOIN workhorse.workflow_members m ON m.job_id = j.id
        WHERE j.id = v_child.job_id;
        CONTINUE WHEN v_job.status IS DISTINCT FROM 'waiting';
        v_payload := v_job.payload;
        IF v_job.mode <> 'none' THEN
            SELECT CASE WHEN v_job.mode = 'one'
                        THEN (array_agg(COALESCE(p.result, 'null'::jsonb)
                                        ORDER BY d.position))[1]
                        ELSE COALESCE(jsonb_agg(COALESCE(p.result, 'null'::jsonb)
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
                expires_at = workhorse._expiry_v1('failed', v_job.retention, v_at),
                error = jsonb_build_object(
                    'type', 'PayloadError',
                    'message', format('the arguments filled in at release are %s bytes, '
                                      'above the payload limit of 1048576',
                                      octet_length(v_payload::text)),
                    'traceback', NULL)
            WHERE j.id = v_job.id;
            PERFORM workhorse._ended_v2(ARRAY[v_job.id]);
            CONTINUE;
        END IF;
        v_due := COALESCE(v_job.run_at, now() + make_interval(secs => COALESCE(v_job.delay, 0)));
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
END
$$;
