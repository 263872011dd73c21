-- When a job that just reached `p_status` expires: `p_retention` maps statuses to seconds kept
-- (JSON, from the app that ran the job); a status it does not name is kept for ever (NULL).
-- STABLE, not IMMUTABLE: timestamptz + interval depends on the time zone, and a function
-- declared less volatile than its body is never inlined (then it costs a call per job).
CREATE FUNCTION workhorse._expiry_v1(p_status text, p_retention jsonb, p_at timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT p_at + make_interval(secs => (p_retention ->> p_status)::double precision)
$$;
