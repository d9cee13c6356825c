-- Counts one socket less (fields reaching 0 are removed); returns the whole hash.
--
-- KEYS: counts
-- ARGV: fields... (the fields)
for i = 1, #ARGV do
  if redis.call('HINCRBY', KEYS[1], ARGV[i], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return redis.call('HGETALL', KEYS[1])
