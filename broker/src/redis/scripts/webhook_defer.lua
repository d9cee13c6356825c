-- Moves a failed event into its conversation's queue, schedules the queue, acknowledges.
--
-- KEYS: stream, queue (the conversation's), due (the tenant's due set)
-- ARGV: entry_id, pending (the event as queued), conv, due_ms
redis.call('RPUSH', KEYS[2], ARGV[2])
if redis.call('LLEN', KEYS[2]) == 1 then redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3]) end
redis.call('XACK', KEYS[1], 'webhooks', ARGV[1])
return 1
