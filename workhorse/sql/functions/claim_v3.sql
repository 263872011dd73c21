-- Claim v3: record a slot's finished jobs of one queue and claim their replacements in one
-- statement, so capacity freed goes straight to the next job: one round trip and one
-- acquisition of the queue's admission lock, where complete_v1 then claim_v2 took two of each
-- (and a wake-up in between). Admission is claim_v2's, unchanged: rate limits, pauses and
-- overrides included.
--
-- The successes (`p_ids`/`p_fences`/`p_results`/`p_retention_ix`/`p_retentions`, as for
-- complete_v1) are recorded first. Only the exceptions come back, as rows whose `status` is set:
-- when every success was accepted as `succeeded` (the usual case) there is no such row, and a
-- row per success would cost more than the claim it rides on; otherwise every success that did
-- not end `succeeded` has one: `canceled` (its cancel was requested while it ran) or `stale`
-- (its fence was rejected). Then claim_v2's rows (`status` NULL), each with the instant it was
-- scheduled for: its schedule's occurrence, else its run_at on a first attempt (a retry moved
-- run_at; NULL).
-- A governed queue's claimers are woken only when this claim took fewer jobs than it freed.
CREATE FUNCTION workhorse.claim_v3(
    p_queue text, p_limit integer, p_lease double precision,
    p_ids bigint[], p_fences bigint[], p_results text[], p_retention_ix integer[],
    p_retentions text[])
RETURNS TABLE (
    id bigint, task text, queue text, ckey text, priority smallint, payload jsonb,
    attempts integer, max_attempts integer, fence bigint, lease_until timestamptz,
    enqueued_at timestamptz, run_at timestamptz, meta jsonb, started_at timestamptz,
    rank integer, next_start_in double precision, status text, scheduled_for timestamptz)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_governed boolean;
    v_freed integer := 0;
    v_claimed integer;
    v_accepted bigint[];
    v_fences bigint[];
    v_statuses text[];
BEGIN
    IF p_ids IS NOT NULL AND cardinality(p_ids) > 0 THEN
        -- A governed queue's lock first, as claim_v2 will take it: our jobs' row locks must not
        -- be held while we wait for it, or a claimer holding it that reclaims one of them (its
        -- lease expired) would wait for us while we wait for it.
        v_governed := EXISTS (SELECT 1 FROM workhorse.policies p WHERE p.queue = p_queue)
                      OR EXISTS (SELECT 1 FROM workhorse.queue_controls c WHERE c.queue = p_queue);
        IF v_governed THEN
            PERFORM pg_advisory_xact_lock(workhorse._admission_lock_id_v1(p_queue));
        END IF;
        SELECT COALESCE(array_agg(r.id), '{}'), array_agg(r.fence), array_agg(r.status)
        INTO v_accepted, v_fences, v_statuses
        FROM workhorse._record_successes_v1(
            p_ids, p_fences, p_results, p_retention_ix, p_retentions) AS r;
        v_freed := cardinality(v_accepted);
        IF v_freed < cardinality(p_ids) OR NOT 'succeeded' = ALL(v_statuses) THEN
            RETURN QUERY
                SELECT b.id, NULL::text, p_queue, NULL::text, NULL::smallint, NULL::jsonb,
                       NULL::integer, NULL::integer, b.fence, NULL::timestamptz,
                       NULL::timestamptz, NULL::timestamptz, NULL::jsonb, NULL::timestamptz,
                       NULL::integer, NULL::double precision, COALESCE(a.status, 'stale'),
                       NULL::timestamptz
                FROM unnest(p_ids, p_fences) AS b(id, fence)
                LEFT JOIN unnest(v_accepted, v_fences, v_statuses) AS a(id, fence, status)
                    ON a.id = b.id AND a.fence = b.fence
                WHERE a.status IS DISTINCT FROM 'succeeded';
        END IF;
    END IF;

    RETURN QUERY
        SELECT c.id, c.task, c.queue, c.ckey, c.priority, c.payload, c.attempts, c.max_attempts,
               c.fence, c.lease_until, c.enqueued_at, c.run_at, c.meta, c.started_at, c.rank,
               c.next_start_in, NULL::text,
               -- A lookup by id, only for a job a schedule fired (its meta names the
               -- schedule): a join would be planned for claim_v2's estimated 1,000 rows and
               -- hash the jobs table, and a lookup for every job costs a tenth of the claim.
               COALESCE(CASE WHEN c.meta ? 'schedule' THEN
                            (SELECT j.scheduled_for FROM workhorse.jobs j WHERE j.id = c.id)
                        END,
                        CASE WHEN c.attempts = 1 THEN c.run_at END)
        FROM workhorse.claim_v2(p_queue, p_limit, p_lease) AS c;
    GET DIAGNOSTICS v_claimed = ROW_COUNT;

    IF v_freed > v_claimed AND v_governed THEN
        PERFORM workhorse._wake_v1(p_queue);
    END IF;
END
$$;
