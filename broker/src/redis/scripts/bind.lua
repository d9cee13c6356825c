-- Stores a call's binding (with its page message and its cancel, built in Rust, for a timeout
-- or an agent's cancel), then publishes the page message to every node holding a socket of the
-- conversation.
--
-- KEYS: call, pending, deadlines, sockets
-- ARGV: id (compact), conv_ref, client (compact), deadline (ms), node, summary
--       (tool/kind/flags), frame (the page message), cancel, ttl (ms), deadline_member,
--       channel_prefix, channel_suffix, one_string ('1': one string, else a hash: `bind`)
local call, pending, deadlines, sockets_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local frame, channel_prefix, channel_suffix = ARGV[7], ARGV[11], ARGV[12]
bind(call, pending, deadlines, ARGV)
to_nodes(socket_nodes(sockets_key), channel_prefix, channel_suffix, frame)
return 1
