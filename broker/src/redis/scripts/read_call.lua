-- A call, pending or finished (call_fields), with how its confirmation ended (`resolve`).
-- Returns {conversation ref, clientId, deadline, node, tool/kind/flags, state, outcome,
-- resolution ('' while none)}, or {} when there is none.
--
-- KEYS: call
-- ARGV: none
local f = call_fields(KEYS[1])
if not f[1] then return {} end
return {f[1], f[2], f[3], f[4] or '', f[6], f[5], f[7] or '', redis.call('GET', KEYS[1] .. ':r') or ''}
