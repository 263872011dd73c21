SELECT hold_id, lease_until FROM workhorse.renew_holds_v1(%s::bigint[], %s::double precision[])
