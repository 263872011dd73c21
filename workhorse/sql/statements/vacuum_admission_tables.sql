-- Every claim of a per-key or rate-limited queue deletes hints, moves heads and counts starts;
-- their dead rows would otherwise slow claims until autovacuum comes round.
VACUUM workhorse.key_hints, workhorse.key_heads, workhorse.rate_starts
