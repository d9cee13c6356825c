-- Counts one socket less (fields reaching 0 are removed); returns the whole hash. With the
-- conversation's hash (a page socket), its sockets' summary moves too (`summary_add`).
--
-- KEYS: counts, conv?
-- ARGV: fields... (the fields)
for i = 1, #ARGV do
  if redis.call('HINCRBY', KEYS[1], ARGV[i], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
if KEYS[2] then summary_add(KEYS[2], ARGV, -1, nil) end
return redis.call('HGETALL', KEYS[1])
