-- The queue's enqueue gate: enqueues share it; an install that turns per-key limits on holds it
-- exclusively, so no enqueue that read "no policy" (and wrote no key hint) is still in flight
-- when the heads are rebuilt.
CREATE FUNCTION workhorse._enqueue_gate_id_v1(p_queue text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT hashtextextended(p_queue, 7047) $$;
