-- Writes a tenant's record if it is as expected (`catalog::check`): absent, or at the given
-- version. The new version is the catalog's next revision; the change is announced.
-- Returns {'ok', version} or {'exists'}, {'missing'}, {'stale'}.
--
-- KEYS: catalog, revision
-- ARGV: id, record, expected ('absent' or a version), channel
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local version = nil
if cur then version = string.match(cur, '^(%d+)') end
if ARGV[3] == 'absent' then
  if cur then return {'exists'} end
else
  if not cur then return {'missing'} end
  if version ~= ARGV[3] then return {'stale'} end
end
local v = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], v .. '\n' .. ARGV[2])
redis.call('SPUBLISH', ARGV[4], ARGV[1])
return {'ok', tostring(v)}
