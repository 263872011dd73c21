-- Every policy, with its fairness, on_key_full and rate bursts.
SELECT namespace, queue, max_active, max_active_per_key, created_at, updated_at,
       rate_limit, rate_period, rate_limit_per_key, rate_period_per_key, fairness,
       on_key_full, rate_burst, rate_burst_per_key
FROM workhorse.policies
WHERE (%s::text IS NULL OR namespace = %s::text)
ORDER BY namespace, queue
