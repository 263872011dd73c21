-- The budget holds whose lease runs (docs/design.md "Holds"), every budget's or one's, oldest
-- first.
SELECT h.id, h.budget, h.units, h.hold_key, h.lease_until, h.acquired_at, h.holder, h.pid
FROM workhorse.budget_holds h
WHERE (%s::text IS NULL OR h.budget = %s::text) AND h.lease_until > clock_timestamp()
ORDER BY h.acquired_at, h.id
