-- fire_schedules.sql of 0.2.0 (frozen), through the version that gives each fired job its
-- schedule's cost, rate_cost and weight (docs/design.md "Fair share and job cost").
SELECT f.schedule_id, f.occurrence, f.job_id
FROM workhorse.fire_schedules_v2(%s::bigint[], %s::timestamptz[], %s::bigint[],
                                 %s::timestamptz[]) AS f
