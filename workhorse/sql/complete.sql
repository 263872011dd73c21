SELECT id FROM workhorse.complete_v1(%s::bigint[], %s::bigint[], %s::text[]) AS id
