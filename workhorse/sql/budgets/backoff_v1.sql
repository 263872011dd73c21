-- Back-pressure from a handler (docs/design.md "Back-pressure"): the running job (`p_id` under
-- `p_fence`) says its downstream wants a pause, and no claim starts a job of the scope until
-- `p_seconds` from now, fleet-wide:
--  * 'budget': the job's budget (or `p_budget`, any named budget): every queue that counts it;
--  * 'key': the job's key in its queue (a keyless job has none: WH005);
--  * 'queue': the job's queue;
--  * NULL: the job's budget (or `p_budget`) when it has one, else its queue.
-- A later backoff of the same target keeps the later end (and names its own job when it is the
-- later one). An adaptive budget's effective max_active is halved (at least 1) by a backoff
-- that finds none in force (_adaptive_max_v1 says how it grows back). With `p_release` (the handler raised Backoff) the job itself goes back to `ready`
-- with its attempt given back (release_v2: canceled instead when a cancel was requested);
-- without (current_job().backoff()) it runs on. Running jobs are never touched.
--
-- Returns one row: the job's status (`active` when not released; NULL, and no target, when the
-- fence is stale: nothing is written), the scope, the target's name (queue or budget), its key,
-- and the backoff's end. Bad input raises WH005 (InvalidOptionsError) and writes nothing.
--
-- Locks: the target's admission lock, as a pause takes its queue's (a queue's, exclusively; a
-- budget's), before the job's row: a claim that counts the target either committed before this
-- backoff or sees it. A backoff of a queue or key stamps the queue's control row, so the queue's
-- claims take the exclusive lock from then on and each reads the backoff.
CREATE FUNCTION workhorse.backoff_v1(
    p_id bigint, p_fence bigint, p_seconds double precision, p_scope text, p_budget text,
    p_release boolean, p_retention text)
RETURNS TABLE (status text, scope text, name text, ckey text, until timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_job record;
    v_scope text;
    v_name text;
    v_key text := '';
    v_until timestamptz;
    v_status text := 'active';
    v_halved integer;  -- an adaptive budget's effective max_active after this backoff
BEGIN
    IF p_seconds IS NULL OR NOT (p_seconds > 0 AND p_seconds <= 86400) THEN
        RAISE EXCEPTION 'Backoff retry_after must be more than 0 and at most 86400 seconds, got %',
            p_seconds USING ERRCODE = 'WH005';
    END IF;
    IF p_scope IS NOT NULL AND p_scope NOT IN ('queue', 'key', 'budget') THEN
        RAISE EXCEPTION 'Backoff scope must be "budget", "key" or "queue", got %', p_scope
            USING ERRCODE = 'WH005';
    END IF;
    IF p_budget IS NOT NULL AND COALESCE(p_scope, 'budget') <> 'budget' THEN
        RAISE EXCEPTION 'Backoff budget= goes with scope="budget", got scope=%', p_scope
            USING ERRCODE = 'WH005';
    END IF;

    SELECT j.queue, j.ckey, j.budget INTO v_job
    FROM workhorse.jobs j
    -- (Without release, any status: the job's success may have been recorded first, riding on
    -- a claim, and its fence still names this attempt.)
    WHERE j.id = p_id AND j.fence = p_fence AND (j.status = 'active' OR NOT p_release);
    IF NOT FOUND THEN
        IF p_release THEN
            -- A resend of a release already recorded (the connection broke before the reply):
            -- the job waits under the same fence (only a claim changes it).
            RETURN QUERY SELECT j.status, NULL::text, NULL::text, NULL::text, NULL::timestamptz
                FROM workhorse.jobs j
                WHERE j.id = p_id AND j.fence = p_fence AND j.status IN ('ready', 'canceled');
        END IF;
        RETURN;
    END IF;

    v_scope := COALESCE(p_scope, CASE WHEN COALESCE(p_budget, v_job.budget) IS NOT NULL
                                      THEN 'budget' ELSE 'queue' END);
    IF v_scope = 'budget' THEN
        v_name := COALESCE(p_budget, v_job.budget);
        IF v_name IS NULL THEN
            RAISE EXCEPTION 'Backoff(scope="budget") from job % of queue %, which names no budget: '
                'pass budget= or another scope', p_id, v_job.queue USING ERRCODE = 'WH005';
        END IF;
        PERFORM pg_advisory_xact_lock(workhorse._budget_lock_id_v1(v_name));
    ELSE
        v_name := v_job.queue;
        IF v_scope = 'key' THEN
            v_key := v_job.ckey;
            IF v_key = '' THEN
                RAISE EXCEPTION 'Backoff(scope="key") from job % of queue %, which has no '
                    'concurrency key', p_id, v_job.queue USING ERRCODE = 'WH005';
            END IF;
        END IF;
        PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(v_name));
    END IF;

    v_until := clock_timestamp() + make_interval(secs => p_seconds);
    IF v_scope = 'budget' THEN
        -- An adaptive budget's effective max_active is halved (at least 1) once per backoff:
        -- one raised while another is in force only extends it (a burst of 429s is one signal).
        SELECT CASE WHEN NOT bd.adaptive THEN NULL
                    WHEN bo.until > clock_timestamp() THEN bo.adaptive_max
                    ELSE GREATEST(1, workhorse._adaptive_max_v1(
                        COALESCE(o.max_active, bd.max_active), bo.adaptive_max, bo.until,
                        bo.retry_after, clock_timestamp()) / 2) END
        INTO v_halved
        FROM (SELECT v_name AS name) AS n
        JOIN workhorse.budgets bd ON bd.name = n.name
        LEFT JOIN workhorse.budget_controls o
            ON o.name = n.name
           AND (o.override_expires_at IS NULL OR o.override_expires_at > clock_timestamp())
        LEFT JOIN workhorse.backoffs bo
            ON bo.scope = 'budget' AND bo.name = n.name AND bo.ckey = '';
    END IF;
    INSERT INTO workhorse.backoffs AS b (scope, name, ckey, until, by_job, set_at, retry_after,
                                         adaptive_max)
    VALUES (v_scope, v_name, v_key, v_until, p_id, clock_timestamp(), p_seconds, v_halved)
    ON CONFLICT ON CONSTRAINT backoffs_pkey DO UPDATE
        SET until = excluded.until, by_job = excluded.by_job, set_at = excluded.set_at,
            retry_after = excluded.retry_after, adaptive_max = excluded.adaptive_max
        WHERE b.until < excluded.until;
    SELECT b.until INTO v_until FROM workhorse.backoffs b
    WHERE b.scope = v_scope AND b.name = v_name AND b.ckey = v_key;
    IF v_scope <> 'budget' THEN
        INSERT INTO workhorse.queue_controls AS c (queue, backed_off_until)
        VALUES (v_name, v_until)
        ON CONFLICT (queue) DO UPDATE
            SET backed_off_until = GREATEST(c.backed_off_until, excluded.backed_off_until);
    END IF;

    IF p_release THEN
        SELECT r.status INTO v_status
        FROM workhorse.release_v2(ARRAY[p_id], ARRAY[p_fence], p_retention) AS r;
    END IF;
    RETURN QUERY SELECT v_status, v_scope, v_name, NULLIF(v_key, ''), v_until;
END
$$;
