-- A node's traffic entry of a tenant (traffic.rs): the tenant's hash, field the node id, value
-- `<lapse ms>|<written ms>|<json>`. Writes this node's entry stamped with Redis's own time,
-- drops the entries that lapsed (nodes that stopped writing), and keeps the hash as long as its
-- longest-lived entry. Returns Redis's time (ms).
--
-- KEYS: traffic (the tenant's hash)
-- ARGV: node, body (json), ttl (ms)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1],
  string.format('%.0f|%.0f|', now + ttl, now) .. ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local lapse = tonumber(string.match(all[i + 1], '^(%d+)|'))
  if not lapse or lapse <= now then redis.call('HDEL', KEYS[1], all[i]) end
end
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return string.format('%.0f', now)
