-- Gives a lease back, only if this node still holds it.
--
-- KEYS: lease
-- ARGV: node
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
