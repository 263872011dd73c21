SELECT expired_overrides, pruned_starts FROM workhorse.housekeeping_v1()
