-- Accepts a confirmed once, from the page that sent the needs_confirmation
-- (`model::check_confirm`); returns the id and tool/kind/flags of the call that carried it. A
-- missing key is unknown_confirm; the caller tells a confirmId of another conversation through
-- its index. `u` is 0 pending, c confirmed by its page, 1 expired by the sweep (or confirmed,
-- by an earlier build). Submitted `again` (the node did not learn the outcome of an earlier
-- submission), a confirmation its page confirmed answers as accepted. Accepted, its change is
-- recorded in the outbox, to be announced as confirmation.resolved, and the page's final outcome
-- is written to its call (`resolve`), kept `kept` ms from then.
--
-- KEYS: confirm, outbox
-- ARGV: client, again ('' or 'again'), outbox_name, outbox_entry, outcome, kept
local f = redis.call('HMGET', KEYS[1], 'k', 'c', 'u', 't', 'ck')
if not f[1] then return {'unknown_confirm'} end
if f[2] ~= ARGV[1] then return {'mismatch'} end
if f[3] == 'c' and ARGV[2] == 'again' then return {'ok', f[1], f[4] or ''} end
if f[3] == '1' or f[3] == 'c' then return {'duplicate'} end
redis.call('HSET', KEYS[1], 'u', 'c')
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
resolve(f[5], ARGV[5], ARGV[6])
return {'ok', f[1], f[4] or ''}
