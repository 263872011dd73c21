-- The commit barrier: sent after a claim that committed asynchronously (claim_v2's
-- `p_async_commit`), on the same connection, as a transaction of its own. setval writes WAL
-- every time, so this commit waits for the flush of the WAL up to its own commit record, which
-- comes after the claim's: once it returns, the claim is on disk, and only then does the worker
-- start the claimed jobs or count the successes that rode on it. With synchronous replication
-- configured, it waits for the standby as every other commit does.
SELECT setval('workhorse.commit_barrier_seq', 1, false)
