-- The page messages of the conversation's pending calls, those stored as one string (in the
-- calls by deadline) and those a node stored as hashes beside a node of 0.4.0 (in the pending
-- set); forgets finished ones of the set (a finished call leaves the calls by deadline itself).
--
-- KEYS: pending, due
-- ARGV: call_prefix (of the conversation's partition)
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local frame = page_part(ARGV[1] .. id, call_fields(ARGV[1] .. id), 'f')
  if frame then table.insert(out, frame) end
end
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local frame = page_part(ARGV[1] .. id, call_fields(ARGV[1] .. id), 'f')
  if frame then table.insert(out, frame) else redis.call('SREM', KEYS[1], id) end
end
return out
