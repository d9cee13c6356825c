-- What a conversation announced once for its whole life (`tool.unpinned` of a tool and digest):
-- a field `a:<name>` of the conversation's hash per name, so a mark lives, is refreshed and goes
-- with the conversation itself. At most ARGV[2] names are kept per conversation (`a#` counts
-- them); past the bound a name is answered new without being kept (the caller's once-window,
-- `Events::emit_once`, then applies). A conversation whose hash is gone keeps nothing (no hash is
-- made without its TTL) and answers every name new. With ARGV[1] '0' the names are unmarked (an
-- announcement that could not be emitted).
--
-- KEYS: conv
-- ARGV: mark ('1' to mark, '0' to unmark), max, names...
-- Returns 1 or 0 per name: marking, 1 when it was not marked before; unmarking, 1 when it was.
local out = {}
if redis.call('EXISTS', KEYS[1]) == 0 then
  for i = 3, #ARGV do out[#out + 1] = ARGV[1] == '1' and 1 or 0 end
  return out
end
local n = tonumber(redis.call('HGET', KEYS[1], 'a#') or '0')
local max = tonumber(ARGV[2])
for i = 3, #ARGV do
  local field = 'a:' .. ARGV[i]
  if ARGV[1] == '1' then
    if redis.call('HEXISTS', KEYS[1], field) == 1 then
      out[#out + 1] = 0
    else
      if n < max then
        redis.call('HSET', KEYS[1], field, '1')
        n = n + 1
      end
      out[#out + 1] = 1
    end
  else
    local gone = redis.call('HDEL', KEYS[1], field)
    n = n - gone
    out[#out + 1] = gone
  end
end
if n < 0 then n = 0 end
redis.call('HSET', KEYS[1], 'a#', n)
return out
