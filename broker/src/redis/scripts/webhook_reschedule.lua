-- Replaces the queue head (its attempt count) and schedules the next attempt.
--
-- KEYS: queue, due
-- ARGV: conv, pending (the head as queued), due_ms
if redis.call('LLEN', KEYS[1]) == 0 then return 0 end
redis.call('LSET', KEYS[1], 0, ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
