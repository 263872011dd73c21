-- The namespace that owns each named queue (the one whose sync stored its policy), or NULL for a
-- queue no namespace governs: what operator actions print, so that an operator sees whose queue
-- they act on.
SELECT q.queue, p.namespace
FROM unnest(%s::text[]) AS q(queue)
LEFT JOIN workhorse.policies p ON p.queue = q.queue
ORDER BY q.queue
