SELECT (SELECT min(s.next_run_at) FROM workhorse.schedules s WHERE s.namespace = %s), now()
