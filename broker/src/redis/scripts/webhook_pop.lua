-- Removes the queue head (delivered or dead); the next one is due at once.
--
-- KEYS: queue, due
-- ARGV: conv, now (ms)
redis.call('LPOP', KEYS[1])
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
end
return 1
