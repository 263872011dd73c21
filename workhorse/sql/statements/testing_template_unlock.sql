SELECT pg_advisory_unlock(%s)
