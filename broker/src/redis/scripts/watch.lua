-- Adds this node to the watchers of a pending call (its outcome message then comes here too,
-- from result.lua or timeout.lua).
-- Returns {'pending', conversation ref}, {'ended'} or {'missing'}.
--
-- KEYS: call
-- ARGV: node
local f = call_fields(KEYS[1])
if not f[1] then return {'missing'} end
if f[5] ~= 'p' then return {'ended'} end
local w = f[9] or ''
if not string.find(' ' .. w .. ' ', ' ' .. ARGV[1] .. ' ', 1, true) then
  if f[10] then
    redis.call('SET', KEYS[1], pending_string(f, w .. ' ' .. ARGV[1]), 'KEEPTTL')
  else
    redis.call('HSET', KEYS[1], 'w', w .. ' ' .. ARGV[1])
  end
end
return {'pending', f[1]}
