-- Marks a pending call timed out (packed as a result is), records its change in the outbox (to
-- be announced as call.timeout), sends the pages its stored cancel and the waiting node the
-- outcome. A call whose key is gone (its retention passed before any sweep came) leaves the
-- pending set and the calls by deadline too (neither has an expiry of its own while its
-- conversation is held). A call leaves the one its form put it in (`bind`).
-- Returns {'ok', conversation ref, clientId, deadline, node, tool/kind/flags} or the state.
--
-- KEYS: call, pending, deadlines, sockets, outbox, due
-- ARGV: id (compact), outcome (the timeout), channel_prefix, channel_suffix, message (the
--       outcome message), deadline_member, outbox_name, outbox_entry
local f = call_fields(KEYS[1])
if not f[1] then
  redis.call('SREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[6], ARGV[1])
  return {'missing'}
end
if f[5] ~= 'p' then return {f[5]} end
local cancel = page_part(KEYS[1], f, 'x')
local one_string = f[10]
finish(KEYS[1], f, 't', ARGV[2])
redis.call('HSET', KEYS[5], ARGV[7], ARGV[8])
unlist(one_string, KEYS[6], KEYS[2], KEYS[3], ARGV[1], ARGV[6])
if cancel then to_nodes(socket_nodes(KEYS[4]), ARGV[3], ARGV[4], cancel) end
redis.call('SPUBLISH', ARGV[3] .. f[4] .. ARGV[4], ARGV[5])
to_watchers(f, ARGV[3], ARGV[4], ARGV[5])
return {'ok', f[1], f[2], f[3], f[4], f[6]}
