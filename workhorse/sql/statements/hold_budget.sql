SELECT hold_id, lease_until, retry_in
FROM workhorse.hold_budget_v1(%s::text, %s::integer, %s::double precision, %s::text, %s::text,
                              %s::integer)
