-- Appends an event to the tenant's stream and publishes it to live readers, then trims the
-- oldest events beyond the retention in count and in bytes (`model::events_to_trim`), never past
-- an event the webhook group has not read and acknowledged: those stay until delivered or
-- dead-lettered. Returns the event id and how many events were held back from trimming. With a
-- third key (`Events::emit_once`), an event already emitted under that name is not emitted
-- again: its id is returned with a third element, and the name is kept once_ttl ms.
--
-- KEYS: stream, bytes (its byte counter), once?
-- ARGV: max_count, max_bytes, event, channel, once_ttl?
local function before(a, b)
  local am, as = string.match(a, '(%d+)-(%d+)')
  local bm, bs = string.match(b, '(%d+)-(%d+)')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
if KEYS[3] then
  local seen = redis.call('GET', KEYS[3])
  if seen then return {seen, '0', 'seen'} end
end
local id = redis.call('XADD', KEYS[1], '*', 'e', ARGV[3])
if KEYS[3] then redis.call('SET', KEYS[3], id, 'PX', ARGV[5]) end
redis.call('SPUBLISH', ARGV[4], id .. '\n' .. ARGV[3])
local bytes = redis.call('INCRBY', KEYS[2], #ARGV[3])
local floor = nil
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if ok then
  for _, g in ipairs(groups) do
    local gname, last = nil, '0-0'
    for i = 1, #g, 2 do
      if g[i] == 'name' then gname = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    local keep = nil
    local p = redis.call('XPENDING', KEYS[1], gname)
    if p[2] then
      keep = p[2]
    else
      local after = redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', 1)[1]
      if after then keep = after[1] end
    end
    if keep and (not floor or before(keep, floor)) then floor = keep end
  end
end
local len = redis.call('XLEN', KEYS[1])
local held = 0
local max_count, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2])
while len > 1 and (len > max_count or bytes > max_bytes) do
  local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
  if floor and not before(first[1], floor) then held = 1; break end
  bytes = bytes - #first[2][2]
  redis.call('XDEL', KEYS[1], first[1])
  len = len - 1
end
if bytes < 0 then bytes = 0 end
redis.call('SET', KEYS[2], bytes)
return {id, held}
