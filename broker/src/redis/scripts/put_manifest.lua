-- Keeps a page's latest manifest (a hash per page load: m the manifest, s its order, r its
-- revision) and makes the page current (only if none is, when re-publishing after Redis lost
-- its data), noting in the conversation's hash which page that is and its manifest's order
-- (`cm`, which a call's placement reads instead of the manifest: see conv_state). Per-page-load state lives in that key alone, so it goes when its page does. A page
-- that sends a manifest is not gone; the page it takes over from, when gone, keeps its manifest
-- only for the grace (`Retention::gone_manifests`). With an outbox key, the change is recorded
-- there, to be announced as page.manifest.
--
-- KEYS: manifest_key, conv, gone, outbox?
-- ARGV: manifest (its JSON), rev, ttl (ms), keep_current ('1' to keep an existing current),
--       client, manifest_prefix, grace (ms), outbox_name?, outbox_entry?
local previous = redis.call('HGET', KEYS[2], 'current')
local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'm', ARGV[1], 's', seq, 'r', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if ARGV[4] == '1' then
  if redis.call('HSETNX', KEYS[2], 'current', ARGV[5]) == 1 or previous == ARGV[5] then
    redis.call('HSET', KEYS[2], 'cm', ARGV[5] .. '\n' .. seq)
  end
else
  redis.call('HSET', KEYS[2], 'current', ARGV[5], 'cm', ARGV[5] .. '\n' .. seq)
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[5])
if previous and previous ~= ARGV[5] and ARGV[4] ~= '1' and redis.call('ZSCORE', KEYS[3], previous) then
  redis.call('PEXPIRE', ARGV[6] .. previous, ARGV[7])
end
if KEYS[4] then redis.call('HSET', KEYS[4], ARGV[8], ARGV[9]) end
return 1
