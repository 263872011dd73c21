-- housekeeping.sql, with named budgets' expired overrides and old start buckets.
SELECT expired_overrides, pruned_starts FROM workhorse.housekeeping_v2()
