-- A fair queue's keys by active units (docs/design.md "Fair share and job cost"), with what each
-- needs for its fair share: its weight, and the sum of the weights of every key with active or
-- ready work (a key's share of max_active is its weight over that sum). Keys with active jobs
-- come from the active jobs (at most max_active units of them), keys with ready work from the
-- key heads (one row a key, the weight its head job's), at most %(sample)s of them, so the cost
-- stays bounded however many keys wait.
WITH active AS (
    SELECT j.ckey, sum(j.cost)::bigint AS units, count(*)::integer AS jobs,
           max(j.weight)::integer AS weight
    FROM workhorse.jobs j
    WHERE j.queue = %(queue)s AND j.status = 'active' AND j.lease_until > clock_timestamp()
    GROUP BY j.ckey
), waiting AS (
    SELECT kh.ckey, j.weight::integer AS weight
    FROM (SELECT kh.ckey, kh.head_id FROM workhorse.key_heads kh
          WHERE kh.queue = %(queue)s
          ORDER BY kh.queue, kh.head_rank, kh.head_id
          LIMIT %(sample)s) AS kh
    JOIN workhorse.jobs j ON j.id = kh.head_id
), keys AS (
    SELECT COALESCE(a.ckey, w.ckey) AS ckey, COALESCE(a.units, 0) AS units,
           COALESCE(a.jobs, 0) AS jobs, COALESCE(w.weight, a.weight, 1) AS weight,
           w.ckey IS NOT NULL AS ready
    FROM active a
    FULL JOIN waiting w ON w.ckey = a.ckey
)
SELECT k.ckey, k.units, k.jobs, k.weight, k.ready,
       sum(k.weight) OVER ()::bigint AS total_weight, count(*) OVER ()::integer AS keys,
       (SELECT count(*) FROM waiting) >= %(sample)s AS capped
FROM keys k
ORDER BY k.units DESC, k.ckey
LIMIT %(shown)s
