SELECT queue, paused, paused_at, max_active, max_active_per_key, rate_limit, rate_period,
       rate_limit_per_key, rate_period_per_key, override_set_at, override_expires_at,
       rate_burst, rate_burst_per_key
FROM workhorse.set_queue_control_v2(
    %s::text, %s::text, %s::integer, %s::integer, %s::integer, %s::double precision,
    %s::integer, %s::double precision, %s::double precision, %s::integer, %s::integer)
