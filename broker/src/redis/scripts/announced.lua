-- What a conversation announced once for its whole life (`tool.unpinned` of a tool and digest):
-- a field `a:<name>` of the conversation's hash per name, its value the announcement that marked
-- it (its frame's name, ARGV[3]), so a mark lives, is refreshed and goes with the conversation
-- itself, and the announcement asking again after a lost reply is answered as the first time. At
-- most ARGV[2] names are kept per conversation (`a#` counts them); past the bound a name is
-- answered new without being kept (the caller's once-window, `Events::emit_once`, then applies).
-- A conversation whose hash is gone keeps nothing (no hash is made without its TTL) and answers
-- every name new. With ARGV[1] '0' the announcement's own marks are taken back (it could not be
-- emitted); another's stay.
--
-- KEYS: conv
-- ARGV: mark ('1' to mark, '0' to unmark), max, by, names...
-- Returns 1 or 0 per name: marking, 1 when it was not marked before or was marked by `by`;
-- unmarking, 1 when `by`'s mark was taken back.
local out = {}
if redis.call('EXISTS', KEYS[1]) == 0 then
  for i = 4, #ARGV do out[#out + 1] = ARGV[1] == '1' and 1 or 0 end
  return out
end
local n = tonumber(redis.call('HGET', KEYS[1], 'a#') or '0')
local max = tonumber(ARGV[2])
local by = ARGV[3]
for i = 4, #ARGV do
  local field = 'a:' .. ARGV[i]
  local was = redis.call('HGET', KEYS[1], field)
  if ARGV[1] == '1' then
    if was then
      out[#out + 1] = was == by and 1 or 0
    else
      if n < max then
        redis.call('HSET', KEYS[1], field, by)
        n = n + 1
      end
      out[#out + 1] = 1
    end
  elseif was == by then
    redis.call('HDEL', KEYS[1], field)
    n = n - 1
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if n < 0 then n = 0 end
redis.call('HSET', KEYS[1], 'a#', n)
return out
