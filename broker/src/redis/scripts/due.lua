-- A conversation's calls whose deadline passed (at most 100, compact ids), for the deadline
-- sweep to time out; and its entry of the partition's conversations by deadline set to its
-- earliest deadline now (those due included: the sweep times them out next, and comes back
-- once more to find the next), or taken out with the conversation's `due` when it holds no
-- call. Calls placed since keep the rule the place script holds: the partition's set has the
-- conversation no later than its earliest deadline, and the conversation's `due` says when.
--
-- KEYS: due, due_convs, conv
-- ARGV: conv_ref, max (ms)
local due, due_convs, conv = KEYS[1], KEYS[2], KEYS[3]
local conv_ref, max = ARGV[1], ARGV[2]
local ids = redis.call('ZRANGEBYSCORE', due, '-inf', max, 'LIMIT', 0, 100)
local first = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
if first[2] then
  redis.call('ZADD', due_convs, first[2], conv_ref)
  if redis.call('EXISTS', conv) == 1 then redis.call('HSET', conv, 'due', first[2]) end
else
  redis.call('ZREM', due_convs, conv_ref)
  redis.call('HDEL', conv, 'due')
end
return ids
