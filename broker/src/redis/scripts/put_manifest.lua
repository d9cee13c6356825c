-- Keeps a page's latest manifest (a hash per page load: m the manifest, s its order, r its
-- revision) and makes the page current (only if none is, when re-publishing after Redis lost
-- its data). Per-page-load state lives in that key alone, so it goes when its page does. With an
-- outbox key, the change is recorded there, to be announced as page.manifest.
--
-- KEYS: manifest_key, conv[, outbox]
-- ARGV: manifest (its JSON), rev, ttl (ms), keep_current ('1' to keep an existing current),
--       client[, outbox_name, outbox_entry]
local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'm', ARGV[1], 's', seq, 'r', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSETNX', KEYS[2], 'current', ARGV[5])
else
  redis.call('HSET', KEYS[2], 'current', ARGV[5])
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if KEYS[3] then redis.call('HSET', KEYS[3], ARGV[6], ARGV[7]) end
return 1
