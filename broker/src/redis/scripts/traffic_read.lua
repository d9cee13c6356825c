-- Every node's traffic entry of a tenant (traffic_put.lua), with Redis's time to tell the
-- lapsed ones by. Returns the time (ms), then the hash's fields and values.
--
-- KEYS: traffic (the tenant's hash)
-- ARGV: none
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
table.insert(all, 1, string.format('%.0f', now))
return all
