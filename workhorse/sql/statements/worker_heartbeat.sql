UPDATE workhorse.workers SET last_seen = now(), stats = %s::jsonb
WHERE id = %s
RETURNING id
