-- Counts one more socket of this node; returns the whole per-node hash (its limits are checked
-- against it), or nothing when `quiet` (a page identified: counted, nothing checked). With the
-- conversation's hash (a page socket), its sockets' summary moves too (`summary_add`).
--
-- KEYS: counts, conv?
-- ARGV: field (the node, or `<node>|<clientId>`), ttl (ms), quiet? ('1')
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if KEYS[2] then summary_add(KEYS[2], {ARGV[1]}, 1, ARGV[2]) end
if ARGV[3] == '1' then return 0 end
return redis.call('HGETALL', KEYS[1])
