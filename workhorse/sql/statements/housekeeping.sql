-- Expired overrides (queues and named budgets) and old start buckets.
SELECT expired_overrides, pruned_starts FROM workhorse.housekeeping_v2()
