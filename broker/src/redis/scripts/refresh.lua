-- Keeps what a live page needs alive while this node holds a socket of its conversation
-- (heartbeat-scoped expiry): the conversation hash, the sockets hash, the current page's
-- manifest and the manifests of the page loads this node holds; and the conversation's pending
-- set (calls a node stored as hashes beside a node of 0.4.0), which a call does not give an
-- expiry (it empties as calls end: this is only its bound should a call's end never take it
-- out). Its calls by deadline (`:due`) get none: the deadline sweep is their bound (due.lua).
--
-- KEYS: conv, sockets, pending
-- ARGV: ttl (ms), manifest_prefix, clients... (the clientIds)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[1])
local current = redis.call('HGET', KEYS[1], 'current')
if current then redis.call('PEXPIRE', ARGV[2] .. current, ARGV[1]) end
for i = 3, #ARGV do redis.call('PEXPIRE', ARGV[2] .. ARGV[i], ARGV[1]) end
return 1
