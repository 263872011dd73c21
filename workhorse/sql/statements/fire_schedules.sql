-- Fires due occurrences; each fired job gets its schedule's cost, rate_cost and weight
-- (docs/design.md "Fair share and job cost").
SELECT f.schedule_id, f.occurrence, f.job_id
FROM workhorse.fire_schedules_v2(%s::bigint[], %s::timestamptz[], %s::bigint[],
                                 %s::timestamptz[]) AS f
