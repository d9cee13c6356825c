-- The tool definitions a tenant's pages presented (seen.rs): the tenant's hash, field
-- `<name>\31<digest>`, value `<first ms>|<last ms>`, stamped with Redis's own time. Each field
-- of ARGV is marked presented now (its first time kept); then the definitions past the age go,
-- and past the bound the ones presented longest ago (seen::to_drop's rule). Returns how many
-- went.
--
-- KEYS: seen (the tenant's hash)
-- ARGV: kept, age (ms), fields... (one per definition presented)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kept = tonumber(ARGV[1])
local age = tonumber(ARGV[2])
for i = 3, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  local first = now
  if v then first = tonumber(string.match(v, '^(%d+)|')) or now end
  redis.call('HSET', KEYS[1], ARGV[i], string.format('%.0f|%.0f', first, now))
end
local all = redis.call('HGETALL', KEYS[1])
local live = {}
local gone = 0
for i = 1, #all, 2 do
  local first, last = string.match(all[i + 1], '^(%d+)|(%d+)$')
  first, last = tonumber(first), tonumber(last)
  if not last or last < now - age then
    redis.call('HDEL', KEYS[1], all[i])
    gone = gone + 1
  else
    live[#live + 1] = {all[i], last, first}
  end
end
if #live > kept then
  table.sort(live, function(a, b)
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[3] < b[3]
  end)
  for i = 1, #live - kept do
    redis.call('HDEL', KEYS[1], live[i][1])
    gone = gone + 1
  end
end
redis.call('PEXPIRE', KEYS[1], age)
return gone
