-- Every claim of a per-key queue deletes hints and moves heads; their dead rows would otherwise
-- slow claims until autovacuum comes round.
VACUUM workhorse.key_hints, workhorse.key_heads
