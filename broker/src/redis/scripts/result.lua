-- Checks a page's result against the binding (`model::check_result`) and marks the call
-- answered, keeping only what a finished call must still answer, packed (finish: the page
-- message, the cancel and the waiting node go, and so does its deadline entry); stores the
-- confirmId binding of a needs_confirmation (with the call's id and tool, so that the
-- confirmation is announced with its tool however late it comes); sends the outcome to the
-- waiting node; the call leaves its conversation's calls by deadline (stored as one string) or
-- the pending set and the partition's deadline set (stored as a hash). An async call's change is recorded in the outbox, to be announced as
-- call.result (`change::Change::Call`). A call key missing here is unknown_id.
-- `received` is '' or, for a result submitted again after an unknown outcome, the ms at which
-- the node received it: the deadline is judged then, and the same outcome already recorded is
-- 'before' (the earlier submission was applied). A needs_confirmation keeps its call as long as
-- its confirmation (whose hash names the call's key, `ck`, for `resolve`).
-- Returns one string (`reply::parts`): `ok` or `before`, then the deadline, the node and the
-- tool/kind/flags (three lines), on lines; or a rejection's code.
--
-- KEYS: call, confirm, pending, deadlines, outbox, due
-- ARGV: conv_ref, client, outcome, confirm_id (or ''), confirm_ttl (ms), id, channel_prefix,
--       channel_suffix, message (the outcome message), deadline_member, compact_id,
--       compact_client (as the call's hash and the pending set hold them), received,
--       outbox_name, outbox_entry, now (ms, the node's clock: the deadline is judged then, or at
--       received when earlier)
local f = call_fields(KEYS[1])
if not f[1] then return 'unknown_id' end
if f[1] ~= ARGV[1] or f[2] ~= ARGV[12] then return 'mismatch' end
if f[5] == 'a' then
  if ARGV[13] ~= '' and f[7] == ARGV[3] then return 'before\n' .. f[3] .. '\n' .. (f[4] or '') .. '\n' .. f[6] end
  return 'duplicate'
end
if f[5] == 't' then return 'late' end
local now = tonumber(ARGV[16])
if ARGV[13] ~= '' and tonumber(ARGV[13]) < now then now = tonumber(ARGV[13]) end
if now > tonumber(f[3]) then return 'late' end
local one_string = f[10]
finish(KEYS[1], f, 'a', ARGV[3])
unlist(one_string, KEYS[6], KEYS[3], KEYS[4], ARGV[11], ARGV[10])
if ARGV[4] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'k', ARGV[6], 't', f[6], 'c', ARGV[2], 'u', '0', 'ck', KEYS[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[5]) then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
end
if is_async(f[6]) then redis.call('HSET', KEYS[5], ARGV[14], ARGV[15]) end
redis.call('SPUBLISH', ARGV[7] .. f[4] .. ARGV[8], ARGV[9])
to_watchers(f, ARGV[7], ARGV[8], ARGV[9])
return 'ok\n' .. f[3] .. '\n' .. (f[4] or '') .. '\n' .. f[6]
