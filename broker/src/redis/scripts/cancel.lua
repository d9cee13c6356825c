-- Sends the stored protocol cancel of a pending call to the pages; returns the call.
-- Returns {conversation ref, clientId, deadline, node, tool/kind/flags, state, outcome}.
--
-- KEYS: call, sockets
-- ARGV: channel_prefix, channel_suffix
local f = call_fields(KEYS[1])
if not f[1] then return {} end
local cancel = page_part(KEYS[1], f, 'x')
if cancel then to_nodes(socket_nodes(KEYS[2]), ARGV[1], ARGV[2], cancel) end
return {f[1], f[2], f[3], f[4] or '', f[6], f[5], f[7] or ''}
