-- Counts one more socket of this node; returns the whole per-node hash.
--
-- KEYS: counts
-- ARGV: field (the node), ttl (ms)
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.call('HGETALL', KEYS[1])
