-- GCRA: gives back unspent calls of the tenant's rate, then takes up to `want` at once (a
-- node's reserve on Redis Cluster, `rate::Reserves`). Returns {taken, 0}, or {0, µs} until one
-- call would be allowed.
--
-- KEYS: rate
-- ARGV: interval (emission interval, µs), burst, want, back
local taken, wait = gcra(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
return {taken, wait}
