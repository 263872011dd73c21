-- Fresh planner statistics for `jobs` (jobs_statistics_stale.sql says when). A sample of at
-- most 30,000 rows at the default statistics target, whatever the table's size.
ANALYZE workhorse.jobs
