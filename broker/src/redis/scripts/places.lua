-- Counted sessions (bounded hosted MCP sessions): a sorted set of the tenant's and one of the
-- holder's, member the session id, score when it lapses; lapsed members are dropped first.
-- take counts the session unless a set is full (a session counted already is only kept), keep
-- restarts the time of a counted one, give drops it. Time is Redis's own.
-- Returns ok, holder or tenant (the bound that refused).
--
-- KEYS: tenant, holder (their sets)
-- ARGV: op (take, keep or give), id, tenant_bound, holder_bound, ttl (ms)
local op, id = ARGV[1], ARGV[2]
if op == 'give' then
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  return 'ok'
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local counted = redis.call('ZSCORE', KEYS[1], id)
if op == 'keep' and not counted then return 'ok' end
if op == 'take' and not counted then
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 'holder' end
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 'tenant' end
end
local lapse = now + tonumber(ARGV[5])
redis.call('ZADD', KEYS[1], lapse, id)
redis.call('ZADD', KEYS[2], lapse, id)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 'ok'
