-- The lowest and highest job ids (two ends of the primary key; NULLs when there is no job): where
-- the dashboard's search window starts and whether it reached the oldest job.
SELECT min(id), max(id) FROM workhorse.jobs
