-- The queues with per-key limits whose policy a namespace owns (what App.sync may prune).
SELECT s.queue
FROM workhorse.key_limit_sets s
JOIN workhorse.policies p ON p.queue = s.queue
WHERE p.namespace = %(namespace)s
ORDER BY s.queue
