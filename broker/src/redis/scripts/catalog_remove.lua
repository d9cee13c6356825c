-- Removes a tenant's record if it is at the given version; the change is announced.
-- Returns {'ok'}, {'missing'} or {'stale'}.
--
-- KEYS: catalog, revision
-- ARGV: id, version, channel
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return {'missing'} end
if string.match(cur, '^(%d+)') ~= ARGV[2] then return {'stale'} end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
redis.call('SPUBLISH', ARGV[3], ARGV[1])
return {'ok'}
