SELECT f.schedule_id, f.occurrence, f.job_id
FROM workhorse.fire_schedules_v1(%s::bigint[], %s::timestamptz[], %s::bigint[],
                                 %s::timestamptz[]) AS f
