-- Takes up to `count` due conversations, leasing each until `lease_until` (no other worker
-- takes it).
--
-- KEYS: due
-- ARGV: now (ms), lease_until (ms), count
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, conv in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[2], conv) end
return due
