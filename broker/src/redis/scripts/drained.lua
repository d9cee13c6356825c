-- Records that a draining node closed the conversation's sockets (never creating the hash
-- without a TTL).
--
-- KEYS: conv
-- ARGV: now (ms), ttl (ms)
redis.call('HSET', KEYS[1], 'drained', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
