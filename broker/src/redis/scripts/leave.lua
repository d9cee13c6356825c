-- A page socket closed, released once under its name: counts it down (<node>, and
-- <node>|<clientId> for an identified socket; fields reaching 0 removed). Its page is gone when
-- no socket of its clientId is left on a live node (`model::Presence`); with an outbox key, the
-- page's leaving is then recorded there, to be announced as page.disconnected. The release's
-- marker keeps what it meant: asked again, it changes nothing and answers the same.
-- Returns 1 when the page is gone, else 0.
--
-- KEYS: sockets, marker (the release's)[, outbox]
-- ARGV: node, client (or ''), marker_ttl (ms), outbox_name, outbox_entry ('' each without an
--       outbox), the live node ids
local done = redis.call('GET', KEYS[2])
if done then return tonumber(done) end
local fields = {ARGV[1]}
if ARGV[2] ~= '' then table.insert(fields, ARGV[1] .. '|' .. ARGV[2]) end
for _, field in ipairs(fields) do
  if redis.call('HINCRBY', KEYS[1], field, -1) <= 0 then redis.call('HDEL', KEYS[1], field) end
end
local gone = 0
if ARGV[2] ~= '' then
  gone = 1
  local live = set_of(ARGV, 6, #ARGV)
  for _, s in ipairs(sockets(KEYS[1])) do
    if s.client == ARGV[2] and live[s.node] then
      gone = 0
      break
    end
  end
end
if gone == 1 and KEYS[3] then redis.call('HSET', KEYS[3], ARGV[4], ARGV[5]) end
redis.call('SET', KEYS[2], gone, 'PX', ARGV[3])
return gone
