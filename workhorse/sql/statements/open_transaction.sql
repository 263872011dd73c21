-- Any statement: on an idle non-autocommit connection it begins the caller's transaction, so
-- that a block of ours that follows is a savepoint in it rather than a transaction of its own.
SELECT 1
