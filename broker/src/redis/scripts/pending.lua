-- The page messages of the conversation's pending calls; forgets finished ones.
--
-- KEYS: pending
-- ARGV: call_prefix (of the conversation's partition)
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local frame = page_part(ARGV[1] .. id, call_fields(ARGV[1] .. id), 'f')
  if frame then table.insert(out, frame) else redis.call('SREM', KEYS[1], id) end
end
return out
