-- A queue's per-key limit set: one row for the set (ckey NULL, its default) and one per key, in
-- key order, from `after` on (a page of at most `limit` keys); no rows when it has none.
(SELECT p.namespace, NULL::text AS ckey, s.default_max_active, s.default_weight,
        s.default_rate_limit, s.default_rate_period, s.updated_at
 FROM workhorse.key_limit_sets s
 JOIN workhorse.policies p ON p.queue = s.queue
 WHERE s.queue = %(queue)s)
UNION ALL
(SELECT NULL, k.ckey, k.max_active, k.weight, k.rate_limit, k.rate_period, k.updated_at
 FROM workhorse.key_limits k
 WHERE k.queue = %(queue)s AND k.ckey > %(after)s
   AND (%(key)s::text IS NULL OR k.ckey = %(key)s)
 ORDER BY k.queue, k.ckey
 LIMIT %(limit)s)
