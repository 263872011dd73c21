SELECT workhorse.release_hold_v1(%s::bigint)
