-- Per-key limits of one queue as desired state (set_key_limits_v1): the listed keys, the default
-- (when the fifth argument from the end is true), pruning the other keys when asked.
SELECT sync_action, sync_key
FROM workhorse.set_key_limits_v1(
    %(namespace)s::text, %(queue)s::text, %(keys)s::text[], %(max_active)s::integer[],
    %(weights)s::integer[], %(rate_limits)s::integer[], %(rate_periods)s::double precision[],
    %(prune)s::boolean, %(set_default)s::boolean, %(default_max_active)s::integer,
    %(default_weight)s::integer, %(default_rate_limit)s::integer,
    %(default_rate_period)s::double precision)
