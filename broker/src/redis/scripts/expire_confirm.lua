-- The confirmation sweep of one pending confirmation (`model::sweep_confirm`): its page may be
-- present while a socket on a live node named its clientId or has not named any yet; after
-- `grace` of certain absence without a break, it is marked used and returned as expired.
-- Expired, its change is recorded in the outbox, to be announced as confirmation.resolved, and
-- the expiry's refusal is written to its call as its final outcome (`resolve`).
-- Returns {'keep'} (may be present), {'keep', absent since ms}, {'expired', call id,
-- tool/kind/flags} or {'drop'} (used or gone).
--
-- KEYS: confirm, sockets, outbox
-- ARGV: client, now (ms), grace (ms), outbox_name, outbox_entry, outcome, kept (ms),
--       live... (the live node ids)
local f = redis.call('HMGET', KEYS[1], 'k', 'u', 'a', 't', 'ck')
if not f[1] or f[2] == '1' or f[2] == 'c' then return {'drop'} end
local live = set_of(ARGV, 8, #ARGV)
local total, identified, mine = 0, 0, 0
for _, s in ipairs(sockets(KEYS[2])) do
  if live[s.node] then
    if s.client then
      identified = identified + s.n
      if s.client == ARGV[1] then mine = mine + s.n end
    else
      total = total + s.n
    end
  end
end
if mine > 0 or total > identified then
  if f[3] then redis.call('HDEL', KEYS[1], 'a') end
  return {'keep'}
end
if not f[3] then
  redis.call('HSET', KEYS[1], 'a', ARGV[2])
  return {'keep', ARGV[2]}
end
if tonumber(ARGV[2]) - tonumber(f[3]) < tonumber(ARGV[3]) then return {'keep', f[3]} end
redis.call('HSET', KEYS[1], 'u', '1')
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
resolve(f[5], ARGV[6], ARGV[7])
return {'expired', f[1], f[4] or ''}
