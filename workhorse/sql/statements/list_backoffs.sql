-- The backoffs in force (docs/design.md "Back-pressure"), soonest end first.
SELECT b.scope, b.name, NULLIF(b.ckey, ''), b.until, b.by_job
FROM workhorse.backoffs b
WHERE b.until > clock_timestamp()
ORDER BY b.until, b.scope, b.name, b.ckey
