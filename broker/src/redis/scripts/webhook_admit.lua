-- Queues a new event behind its conversation's waiting events, if any, and acknowledges it.
-- Returns 1 when queued, else 0 (deliver it now).
--
-- KEYS: stream, queue (the conversation's)
-- ARGV: entry_id, pending (the event as queued)
if redis.call('LLEN', KEYS[2]) > 0 then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  redis.call('XACK', KEYS[1], 'webhooks', ARGV[1])
  return 1
end
return 0
