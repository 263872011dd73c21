-- Whether `jobs` needs fresh planner statistics: never analyzed (a new install: its first
-- statistics are taken on an empty table, or never, when autovacuum is off), or changed by more
-- rows since its last analysis than it held then (a bulk enqueue into a table analyzed nearly
-- empty). Statistics like those say every partial index of `jobs` holds a row or two, and the
-- planner may then walk a whole ready backlog at every claim (docs/architecture.md "Planner
-- statistics", issue #40). Autovacuum, where it runs, analyzes more often than this.
SELECT (s.last_analyze IS NULL AND s.last_autoanalyze IS NULL)
       OR s.n_mod_since_analyze > GREATEST(1000, c.reltuples)
FROM pg_stat_user_tables s
JOIN pg_class c ON c.oid = s.relid
WHERE s.relid = 'workhorse.jobs'::regclass
