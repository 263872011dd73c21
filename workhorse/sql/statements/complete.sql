SELECT id, fence FROM workhorse.complete_v1(%s::bigint[], %s::bigint[], %s::text[])
