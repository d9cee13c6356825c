-- The conversation as the agent API sees it (conv_state).
-- Returns: effective clientId or '', its manifest or '', open sockets, when a draining node
-- closed its sockets (ms, or ''), the nodes with sockets that are not in the live set
-- (space-separated: the caller refreshes its live set and asks again), the effective page's
-- manifest seq or '', then per connected page: clientId, sockets, rev or ''.
--
-- The conversation and its sockets are read in one command when `one_string` says no node of
-- 0.4.0 or older is live (the sockets from the conversation's summary of them, `conv_state`),
-- and each connected page's manifest in one more (its text with its seq and rev): 2 commands
-- for a conversation of one page.
--
-- KEYS: conv, sockets
-- ARGV: manifest_prefix, one_string ('1' or ''), live... (the live node ids)
local live = set_of(ARGV, 3, #ARGV)
local st = conv_state(KEYS[1], KEYS[2], ARGV[1], live, true, ARGV[2] == '1', true)
local out = {st.effective or '', st.text or '', tostring(st.total), st.drained or '', table.concat(st.skipped, ' '), st.seq}
for client, n in pairs(st.pages) do
  table.insert(out, client)
  table.insert(out, tostring(n))
  table.insert(out, st.info[client][2] or '')
end
return out
