-- A page socket closed, released once under its name: counts it down (<node>, and
-- <node>|<clientId> for an identified socket; fields reaching 0 removed), in the sockets hash
-- and in the conversation's summary of it (`summary_add`). Its page is gone when
-- no socket of its clientId is left on a live node (`model::Presence`); with an outbox key, the
-- page's leaving is then recorded there, to be announced as page.disconnected. A gone page
-- that is not the current one keeps its manifest for the grace, and a conversation's gone page
-- loads keep at most `kept` manifests (`left`, `bound_gone`). The release's marker keeps what it
-- meant: asked again, it changes nothing and answers the same.
-- Whether the page's other sockets are left is read from the summary when `one_string` says no
-- node of 0.4.0 or older is live (every live node keeps it) and the summary held this socket's
-- lines (it was not lost since the socket opened); else from the sockets hash, as 0.4.0 reads it.
-- Returns 1 when the page is gone, else 0.
--
-- KEYS: sockets, marker (the release's), conv, gone, outbox?
-- ARGV: node, client (or ''), marker_ttl (ms), outbox_name, outbox_entry ('' each without an
--       outbox), manifest_prefix, grace (ms), kept, ttl (the conversation's, ms), one_string
--       ('1' or ''), live... (the live node ids)
local done = redis.call('GET', KEYS[2])
if done then return tonumber(done) end
local fields = {ARGV[1]}
if ARGV[2] ~= '' then table.insert(fields, ARGV[1] .. '|' .. ARGV[2]) end
for _, field in ipairs(fields) do
  if redis.call('HINCRBY', KEYS[1], field, -1) <= 0 then redis.call('HDEL', KEYS[1], field) end
end
local lines, current, held = summary_add(KEYS[3], fields, -1, nil)
local gone = 0
local live = set_of(ARGV, 11, #ARGV)
local socks = {}
if ARGV[2] ~= '' then
  if ARGV[10] == '1' and held then socks = summary_entries(lines) else socks = sockets(KEYS[1]) end
  gone = 1
  for _, s in ipairs(socks) do
    if s.client == ARGV[2] and live[s.node] then
      gone = 0
      break
    end
  end
end
if gone == 1 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local manifest_prefix, grace = ARGV[6], tonumber(ARGV[7])
  left(KEYS[4], manifest_prefix, current, ARGV[2], now, grace, ARGV[9])
  bound_gone(KEYS[4], manifest_prefix, current, tonumber(ARGV[8]), now - grace, socks, live)
  if KEYS[5] then redis.call('HSET', KEYS[5], ARGV[4], ARGV[5]) end
end
redis.call('SET', KEYS[2], gone, 'PX', ARGV[3])
return gone
