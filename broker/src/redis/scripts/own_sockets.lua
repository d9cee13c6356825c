-- Puts this node's socket counts of a conversation anew, in its sockets hash and its summary
-- (`summary_set`): after Redis lost its data (the pages this node holds), or, with none, when a
-- node restarted under its fixed id clears what its previous life left.
--
-- KEYS: sockets, conv
-- ARGV: node, ttl (ms), counts... (field, n, …)
local node, ttl = ARGV[1], ARGV[2]
local counts = {}
for i = 3, #ARGV do table.insert(counts, ARGV[i]) end
local own = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local f = flat[i]
  if f == node or string.sub(f, 1, #node + 1) == node .. '|' then table.insert(own, f) end
end
if #own > 0 then redis.call('HDEL', KEYS[1], unpack(own)) end
if #counts > 0 then
  redis.call('HSET', KEYS[1], unpack(counts))
  redis.call('PEXPIRE', KEYS[1], ttl)
end
summary_set(KEYS[2], node, counts, #counts > 0 and ttl or nil)
return 1
