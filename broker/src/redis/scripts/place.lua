-- An agent's call in one round trip: the conversation read, the tenant's rate and the bind.
-- The caller names the page it expects to be current (and its manifest's seq), read before and
-- kept per conversation; when the conversation changed since, nothing is taken or stored and
-- the answer is {'stale'} (read again, then retry). Sockets on a node that is neither in the
-- caller's live set nor known dead answer {'unknown', nodes…} (read the live set again, then
-- retry). Otherwise the rate is taken (when asked here: the call's own token, `need`, and a
-- batch for the node's reserve, `rate::Reserves`), and `model::accepts_calls` decides between
-- {'no_page'} and the bind.
-- The page message is published before the bind (a node hears it only once the script ended):
-- when pages are connected but no node's channel took it (a subscription lost in a failover or
-- a slot move, the node not yet subscribed again), nothing is bound, the rate token is given
-- back and the answer is {'unreached'}: the agent is told 503, never a timeout for a frame no
-- page received.
-- The conversation is read in one command when `one_string` says no node of 0.4.0 or older is
-- live (the sockets from the conversation's summary of them, `conv_state`).
-- Returns one string, its parts on lines (`reply::parts`; a string costs Redis less to answer
-- than a table): `ok\n<held>`, `stale`, `unknown\n<node>…`, `no_page\n<held>`,
-- `unreached\n<held>` or `rate\n<µs>`; `held` the tokens taken for the node's reserve.
--
-- KEYS: call, pending, deadlines, sockets, conv, due, due_convs (the 7 of bind.lua), rate (the
--       conversation again when no token is taken here)
-- ARGV: id, conv_ref, client, deadline, node, summary, frame, cancel, ttl, deadline_member,
--       channel_prefix, channel_suffix, one_string (the 13 of bind.lua), manifest_prefix,
--       expected_client (or ''), expected_seq (or ''), now (ms), grace (reconnect grace, ms),
--       interval (µs, or '' when no token is taken here), burst, want (tokens at most), back
--       (unspent ones given back first), need ('1' when the call's own token is among them),
--       nlive (how many live node ids follow), live... (the live node ids), dead... (the node
--       ids known dead)
local sockets_key, conv, rate = KEYS[4], KEYS[5], KEYS[8]
local frame, channel_prefix, channel_suffix = ARGV[7], ARGV[11], ARGV[12]
local manifest_prefix, expected_client, expected_seq = ARGV[14], ARGV[15], ARGV[16]
local now, grace, interval, burst = ARGV[17], ARGV[18], ARGV[19], ARGV[20]
local want, back, need = ARGV[21], ARGV[22], ARGV[23] == '1'
local nlive = tonumber(ARGV[24])
local live = set_of(ARGV, 25, 24 + nlive)
local dead = set_of(ARGV, 25 + nlive, #ARGV)
local st = conv_state(conv, sockets_key, manifest_prefix, live, false, ARGV[13] == '1')
local unknown = {}
for _, node in ipairs(st.skipped) do
  if not dead[node] then table.insert(unknown, node) end
end
if #unknown > 0 then return 'unknown\n' .. table.concat(unknown, '\n') end
if (st.effective or '') ~= expected_client or st.seq ~= expected_seq then return 'stale' end
local held = 0
if interval ~= '' then
  local taken, wait = gcra(rate, interval, burst, want, back)
  held = taken
  if need then
    if taken == 0 then return 'rate\n' .. wait end
    held = taken - 1
  end
end
local reconnecting = st.total == 0 and st.drained and tonumber(now) - tonumber(st.drained) < tonumber(grace)
if not st.effective or (st.total == 0 and not reconnecting) then return 'no_page\n' .. held end
if to_nodes(st.nodes, channel_prefix, channel_suffix, frame) == 0 and st.total > 0 then
  if interval ~= '' and need then gcra(rate, interval, burst, 0, 1) end
  return 'unreached\n' .. held
end
bind(KEYS, ARGV, st.due, true)
return 'ok\n' .. held
