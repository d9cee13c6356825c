-- The conversation as the agent API sees it (conv_state).
-- Returns: effective clientId or '', its manifest or '', open sockets, when a draining node
-- closed its sockets (ms, or ''), the nodes with sockets that are not in the live set
-- (space-separated: the caller refreshes its live set and asks again), the effective page's
-- manifest seq or '', then per connected page: clientId, sockets, rev or ''.
--
-- KEYS: conv, sockets
-- ARGV: manifest_prefix, live... (the live node ids)
local live = set_of(ARGV, 2, #ARGV)
local st = conv_state(KEYS[1], KEYS[2], ARGV[1], live, true)
local manifest = false
if st.effective then manifest = redis.call('HGET', ARGV[1] .. st.effective, 'm') end
local out = {st.effective or '', manifest or '', tostring(st.total), st.drained or '', table.concat(st.skipped, ' '), st.seq}
for client, n in pairs(st.pages) do
  table.insert(out, client)
  table.insert(out, tostring(n))
  table.insert(out, st.info[client][2] or '')
end
return out
