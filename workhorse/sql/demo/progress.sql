SELECT status, count(*)::integer FROM workhorse.jobs WHERE id >= %s AND queue = ANY(%s::text[])
GROUP BY status
