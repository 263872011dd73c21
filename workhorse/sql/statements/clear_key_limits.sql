-- Delete listed keys' limits of one queue, or (keys NULL) its whole set (clear_key_limits_v1).
SELECT sync_action, sync_key
FROM workhorse.clear_key_limits_v1(%(namespace)s::text, %(queue)s::text, %(keys)s::text[])
