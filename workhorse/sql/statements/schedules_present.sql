-- Whether the schedules table exists (it arrives with its own migration).
SELECT to_regclass('workhorse.schedules') IS NOT NULL
