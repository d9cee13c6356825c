//! The Lua scripts. Each touches the keys of one hash tag only, so it runs atomically on one
//! Redis Cluster shard; each is the single round trip of its operation.

use fred::types::scripts::Script;

/// Stores a call's binding, then publishes the call frame on the conversation's channel.
/// KEYS: call, pending set. ARGV: binding, clientId, deadline ms, node, ttl ms, channel, message,
/// call id.
pub const BIND: &str = r"
redis.call('HSET', KEYS[1], 'b', ARGV[1], 'c', ARGV[2], 'd', ARGV[3], 'n', ARGV[4], 's', 'p', 'f', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('SADD', KEYS[2], ARGV[8])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('SPUBLISH', ARGV[6], ARGV[7])
return 1
";

/// Checks a page's result against the binding and marks the call answered; stores the
/// confirmId binding of a needs_confirmation; sends the outcome to the waiting node.
/// KEYS: call, confirm, pending set. ARGV: clientId, outcome, confirm binding or '', confirm ttl
/// ms, call id, node channel prefix.
pub const RESULT: &str = r"
local f = redis.call('HMGET', KEYS[1], 'b', 'c', 'd', 'n', 's')
if not f[1] then return {'unknown_id'} end
if f[2] ~= ARGV[1] then return {'mismatch'} end
if f[5] == 'a' then return {'duplicate'} end
if f[5] == 't' then return {'late'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(f[3]) then return {'late'} end
redis.call('HSET', KEYS[1], 's', 'a', 'o', ARGV[2])
redis.call('SREM', KEYS[3], ARGV[5])
if ARGV[3] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'b', ARGV[3], 'c', ARGV[1], 'u', '0')
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
redis.call('PUBLISH', ARGV[6] .. f[4], 'r\n' .. ARGV[5] .. '\n' .. ARGV[2])
return {'ok', f[1]}
";

/// Marks a pending call timed out, sends the page its cancel and the waiting node the outcome.
/// KEYS: call, pending set. ARGV: call id, timeout outcome, conversation channel, node channel
/// prefix.
pub const TIMEOUT: &str = r"
local f = redis.call('HMGET', KEYS[1], 'b', 'c', 'n', 's')
if not f[1] then return {'missing'} end
if f[4] ~= 'p' then return {f[4]} end
redis.call('HSET', KEYS[1], 's', 't', 'o', ARGV[2])
redis.call('SREM', KEYS[2], ARGV[1])
local cancel = cjson.encode({protocol = 1, type = 'cancel', clientId = f[2], id = ARGV[1]})
redis.call('SPUBLISH', ARGV[3], f[2] .. '\n' .. cancel)
redis.call('PUBLISH', ARGV[4] .. f[3], 'r\n' .. ARGV[1] .. '\n' .. ARGV[2])
return {'ok', f[1]}
";

/// Sends the protocol cancel of a pending call; returns binding, state and outcome.
/// KEYS: call. ARGV: call id, conversation channel.
pub const CANCEL: &str = r"
local f = redis.call('HMGET', KEYS[1], 'b', 'c', 's', 'o')
if not f[1] then return {} end
if f[3] == 'p' then
  local cancel = cjson.encode({protocol = 1, type = 'cancel', clientId = f[2], id = ARGV[1]})
  redis.call('SPUBLISH', ARGV[2], f[2] .. '\n' .. cancel)
end
return {f[1], f[3], f[4] or ''}
";

/// Accepts a confirmed once, from the page that sent the needs_confirmation.
/// KEYS: confirm. ARGV: clientId.
pub const CONFIRM: &str = r"
local f = redis.call('HMGET', KEYS[1], 'b', 'c', 'u')
if not f[1] then return {'unknown_confirm'} end
if f[2] ~= ARGV[1] then return {'mismatch'} end
if f[3] == '1' then return {'duplicate'} end
redis.call('HSET', KEYS[1], 'u', '1')
return {'ok', f[1]}
";

/// Keeps a page's latest manifest and makes the page current (only if none is, when
/// re-publishing after Redis lost its data).
/// KEYS: manifest, conv. ARGV: manifest, clientId, rev, ttl ms, '1' to keep an existing current.
pub const PUT_MANIFEST: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
redis.call('HSET', KEYS[2], 'seq|' .. ARGV[2], seq, 'rev|' .. ARGV[2], ARGV[3])
if ARGV[5] == '1' then
  redis.call('HSETNX', KEYS[2], 'current', ARGV[2])
else
  redis.call('HSET', KEYS[2], 'current', ARGV[2])
end
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
";

/// The conversation as the agent API sees it, counting only sockets of live nodes.
/// KEYS: conv, sockets. ARGV: manifest key prefix, live node ids…
/// Returns: effective clientId or '', its manifest or '', open sockets, when a draining node
/// closed its sockets (ms, or ''), then per connected page: clientId, sockets, rev or ''.
pub const CONV_READ: &str = r"
local live = {}
for i = 2, #ARGV do live[ARGV[i]] = true end
local socks = redis.call('HGETALL', KEYS[2])
local total, identified = 0, 0
local pages = {}
for i = 1, #socks, 2 do
  local field, n = socks[i], tonumber(socks[i + 1])
  local bar = string.find(field, '|', 1, true)
  local node = field
  if bar then node = string.sub(field, 1, bar - 1) end
  if live[node] and n > 0 then
    if bar then
      local client = string.sub(field, bar + 1)
      pages[client] = (pages[client] or 0) + n
      identified = identified + n
    else
      total = total + n
    end
  end
end
local conv = redis.call('HGETALL', KEYS[1])
local h = {}
for i = 1, #conv, 2 do h[conv[i]] = conv[i + 1] end
local current = h['current']
local effective = current
if current and not pages[current] and total <= identified then
  local best, bestseq = nil, -1
  for client, _ in pairs(pages) do
    local s = tonumber(h['seq|' .. client] or '-1')
    if h['rev|' .. client] and s > bestseq then best, bestseq = client, s end
  end
  if best then effective = best end
end
local manifest = false
if effective then manifest = redis.call('GET', ARGV[1] .. effective) end
local out = {effective or '', manifest or '', tostring(total), h['drained'] or ''}
for client, n in pairs(pages) do
  table.insert(out, client)
  table.insert(out, tostring(n))
  table.insert(out, h['rev|' .. client] or '')
end
return out
";

/// Counts one more socket of this node; returns the whole per-node hash.
/// KEYS: counts. ARGV: field, ttl ms.
pub const COUNT_UP: &str = r"
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.call('HGETALL', KEYS[1])
";

/// Counts one socket less (fields reaching 0 are removed); returns the whole hash.
/// KEYS: counts. ARGV: fields…
pub const COUNT_DOWN: &str = r"
for i = 1, #ARGV do
  if redis.call('HINCRBY', KEYS[1], ARGV[i], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return redis.call('HGETALL', KEYS[1])
";

/// GCRA: one call of the tenant's rate. Returns 0 when allowed, else µs until it would be.
/// KEYS: rate. ARGV: emission interval µs, burst.
pub const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * (tonumber(ARGV[2]) - 1)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
if now < tat - tolerance then return math.floor(tat - tolerance - now) end
local new_tat = math.floor(tat + interval)
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.floor((new_tat - now) / 1000) + 1000)
return 0
";

/// Appends an event to the tenant's stream and publishes it to live readers.
/// KEYS: stream. ARGV: max length, event, channel.
pub const EMIT: &str = r"
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'e', ARGV[2])
redis.call('SPUBLISH', ARGV[3], id .. '\n' .. ARGV[2])
return id
";

/// Expires a pending confirmation whose page has had no socket on a live node for the grace.
/// KEYS: confirm, sockets, conv. ARGV: clientId, now ms, grace ms, live node ids…
pub const EXPIRE_CONFIRM: &str = r"
local f = redis.call('HMGET', KEYS[1], 'b', 'u')
if not f[1] or f[2] == '1' then return {'drop'} end
local live = {}
for i = 4, #ARGV do live[ARGV[i]] = true end
local socks = redis.call('HGETALL', KEYS[2])
for i = 1, #socks, 2 do
  local field, n = socks[i], tonumber(socks[i + 1])
  local bar = string.find(field, '|', 1, true)
  if bar and n > 0 and string.sub(field, bar + 1) == ARGV[1] and live[string.sub(field, 1, bar - 1)] then
    return {'keep'}
  end
end
local gone = redis.call('HGET', KEYS[3], 'gone|' .. ARGV[1])
if not gone then
  redis.call('HSET', KEYS[3], 'gone|' .. ARGV[1], ARGV[2])
  return {'keep'}
end
if tonumber(ARGV[2]) - tonumber(gone) < tonumber(ARGV[3]) then return {'keep'} end
redis.call('HSET', KEYS[1], 'u', '1')
return {'expired', f[1]}
";

/// The frames (`clientId\nframe`) of the conversation's pending calls; forgets finished ones.
/// KEYS: pending set. ARGV: call key prefix.
pub const PENDING: &str = r"
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local f = redis.call('HMGET', ARGV[1] .. id, 's', 'f')
  if f[1] == 'p' and f[2] then table.insert(out, f[2]) else redis.call('SREM', KEYS[1], id) end
end
return out
";

/// All scripts, hashed once.
#[derive(Debug)]
pub struct Scripts {
    pub bind: Script,
    pub result: Script,
    pub timeout: Script,
    pub cancel: Script,
    pub confirm: Script,
    pub put_manifest: Script,
    pub conv_read: Script,
    pub count_up: Script,
    pub count_down: Script,
    pub gcra: Script,
    pub emit: Script,
    pub expire_confirm: Script,
    pub pending: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            bind: Script::from_lua(BIND),
            result: Script::from_lua(RESULT),
            timeout: Script::from_lua(TIMEOUT),
            cancel: Script::from_lua(CANCEL),
            confirm: Script::from_lua(CONFIRM),
            put_manifest: Script::from_lua(PUT_MANIFEST),
            conv_read: Script::from_lua(CONV_READ),
            count_up: Script::from_lua(COUNT_UP),
            count_down: Script::from_lua(COUNT_DOWN),
            gcra: Script::from_lua(GCRA),
            emit: Script::from_lua(EMIT),
            expire_confirm: Script::from_lua(EXPIRE_CONFIRM),
            pending: Script::from_lua(PENDING),
        }
    }
}
