-- Stores a call's binding (with its page message and its cancel, built in Rust, for a timeout
-- or an agent's cancel), then publishes the page message to every node holding a socket of the
-- conversation.
--
-- KEYS: call, pending, deadlines, sockets, conv, due, due_convs
-- ARGV: id (compact), conv_ref, client (compact), deadline (ms), node, summary
--       (tool/kind/flags), frame (the page message), cancel, ttl (ms), deadline_member,
--       channel_prefix, channel_suffix, one_string ('1': one string, else a hash: `bind`)
local sockets_key, conv = KEYS[4], KEYS[5]
local frame, channel_prefix, channel_suffix = ARGV[7], ARGV[11], ARGV[12]
local hash = redis.call('EXISTS', conv) == 1
bind(KEYS, ARGV, hash and redis.call('HGET', conv, 'due'), hash)
to_nodes(socket_nodes(sockets_key), channel_prefix, channel_suffix, frame)
return 1
