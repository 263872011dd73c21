SELECT name, max_active, rate_limit, rate_period, rate_burst, override_set_at, override_expires_at
FROM workhorse.set_budget_control_v1(
    %s::text, %s::text, %s::integer, %s::integer, %s::double precision, %s::integer,
    %s::double precision)
