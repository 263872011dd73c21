SELECT workhorse.adopt_children_v1(%s::bigint, %s::bigint, %s::text, %s::bigint[])
