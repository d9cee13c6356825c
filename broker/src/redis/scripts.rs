//! The Lua scripts. Each touches the keys of one hash tag only, so it runs atomically on one
//! Redis Cluster shard; each is the single round trip of its operation.

use fred::types::scripts::Script;

/// Stores a call's binding (with its `cancel` message, built by `proto`, for a timeout or an
/// agent's cancel), then publishes the call frame on the conversation's channel.
/// KEYS: call, pending set. ARGV: binding, clientId, deadline ms, node, ttl ms, channel, message,
/// call id, cancel message.
pub const BIND: &str = r"
redis.call('HSET', KEYS[1], 'b', ARGV[1], 'c', ARGV[2], 'd', ARGV[3], 'n', ARGV[4], 's', 'p', 'f', ARGV[7], 'x', ARGV[9])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('SADD', KEYS[2], ARGV[8])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('SPUBLISH', ARGV[6], ARGV[7])
return 1
";

/// Checks a page's result against the binding (`model::check_result`) and marks the call
/// answered; stores the confirmId binding of a needs_confirmation (with the call's binding, so
/// that the confirmation is announced with its tool however late it comes); sends the outcome
/// to the waiting node. A call key missing here is `unknown_id`; the caller tells a call of
/// another conversation (mismatch) through the call index.
/// KEYS: call, confirm, pending set. ARGV: clientId, outcome, confirmId or '', confirm ttl ms,
/// call id, node channel prefix, outcome message.
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
  redis.call('HSET', KEYS[2], 'k', f[1], 'c', ARGV[1], 'u', '0')
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
redis.call('PUBLISH', ARGV[6] .. f[4], ARGV[7])
return {'ok', f[1]}
";

/// Marks a pending call timed out, sends the page its stored cancel and the waiting node the
/// outcome. KEYS: call, pending set. ARGV: call id, timeout outcome, conversation channel, node
/// channel prefix, outcome message.
pub const TIMEOUT: &str = r"
local f = redis.call('HMGET', KEYS[1], 'b', 'x', 'n', 's')
if not f[1] then return {'missing'} end
if f[4] ~= 'p' then return {f[4]} end
redis.call('HSET', KEYS[1], 's', 't', 'o', ARGV[2])
redis.call('SREM', KEYS[2], ARGV[1])
if f[2] then redis.call('SPUBLISH', ARGV[3], f[2]) end
redis.call('PUBLISH', ARGV[4] .. f[3], ARGV[5])
return {'ok', f[1]}
";

/// Sends the stored protocol cancel of a pending call; returns binding, state and outcome.
/// KEYS: call. ARGV: conversation channel.
pub const CANCEL: &str = r"
local f = redis.call('HMGET', KEYS[1], 'b', 'x', 's', 'o')
if not f[1] then return {} end
if f[3] == 'p' and f[2] then redis.call('SPUBLISH', ARGV[1], f[2]) end
return {f[1], f[3], f[4] or ''}
";

/// Accepts a confirmed once, from the page that sent the needs_confirmation
/// (`model::check_confirm`); returns the binding of the call that carried it. A missing key is
/// `unknown_confirm`; the caller tells a confirmId of another conversation through its index.
/// KEYS: confirm. ARGV: clientId.
pub const CONFIRM: &str = r"
local f = redis.call('HMGET', KEYS[1], 'k', 'c', 'u')
if not f[1] then return {'unknown_confirm'} end
if f[2] ~= ARGV[1] then return {'mismatch'} end
if f[3] == '1' then return {'duplicate'} end
redis.call('HSET', KEYS[1], 'u', '1')
return {'ok', f[1]}
";

/// Keeps a page's latest manifest (a hash per page load: `m` the manifest, `s` its order, `r`
/// its revision) and makes the page current (only if none is, when re-publishing after Redis
/// lost its data). Per-page-load state lives in that key alone, so it goes when its page does.
/// KEYS: manifest, conv. ARGV: manifest, rev, ttl ms, '1' to keep an existing current, clientId.
pub const PUT_MANIFEST: &str = r"
local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'm', ARGV[1], 's', seq, 'r', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSETNX', KEYS[2], 'current', ARGV[5])
else
  redis.call('HSET', KEYS[2], 'current', ARGV[5])
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
";

/// The conversation as the agent API sees it, counting only sockets of live nodes, with D23's
/// choice of the current page (`model::current_page`).
/// KEYS: conv, sockets. ARGV: manifest key prefix, live node ids…
/// Returns: effective clientId or '', its manifest or '', open sockets, when a draining node
/// closed its sockets (ms, or ''), the nodes with sockets that are not in the live set
/// (space-separated: the caller refreshes its live set and asks again), then per connected page:
/// clientId, sockets, rev or ''.
pub const CONV_READ: &str = r"
local live = {}
for i = 2, #ARGV do live[ARGV[i]] = true end
local socks = redis.call('HGETALL', KEYS[2])
local total, identified = 0, 0
local pages = {}
local unknown = {}
for i = 1, #socks, 2 do
  local field, n = socks[i], tonumber(socks[i + 1])
  local bar = string.find(field, '|', 1, true)
  local node = field
  if bar then node = string.sub(field, 1, bar - 1) end
  if n > 0 and not live[node] then unknown[node] = true end
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
local info = {}
for client, _ in pairs(pages) do
  info[client] = redis.call('HMGET', ARGV[1] .. client, 's', 'r')
end
local h = redis.call('HMGET', KEYS[1], 'current', 'drained')
local current = h[1]
local effective = current
if current and not pages[current] and total <= identified then
  local best, bestseq = nil, -1
  for client, f in pairs(info) do
    local s = tonumber(f[1] or '-1')
    if f[1] and s > bestseq then best, bestseq = client, s end
  end
  if best then effective = best end
end
local manifest = false
if effective then manifest = redis.call('HGET', ARGV[1] .. effective, 'm') end
local skipped = {}
for node, _ in pairs(unknown) do table.insert(skipped, node) end
local out = {effective or '', manifest or '', tostring(total), h[2] or '', table.concat(skipped, ' ')}
for client, n in pairs(pages) do
  table.insert(out, client)
  table.insert(out, tostring(n))
  table.insert(out, info[client][2] or '')
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

/// Appends an event to the tenant's stream and publishes it to live readers, then trims the
/// oldest events beyond the retention in count and in bytes (`model::events_to_trim`), never
/// past an event the webhook group has not read and acknowledged: those stay until delivered or
/// dead-lettered. Returns the event id and how many events were held back from trimming.
/// KEYS: stream, its byte counter. ARGV: max count, max bytes, event, channel.
pub const EMIT: &str = r"
local function before(a, b)
  local am, as = string.match(a, '(%d+)-(%d+)')
  local bm, bs = string.match(b, '(%d+)-(%d+)')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local id = redis.call('XADD', KEYS[1], '*', 'e', ARGV[3])
redis.call('SPUBLISH', ARGV[4], id .. '\n' .. ARGV[3])
local bytes = redis.call('INCRBY', KEYS[2], #ARGV[3])
local floor = nil
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if ok then
  for _, g in ipairs(groups) do
    local gname, last = nil, '0-0'
    for i = 1, #g, 2 do
      if g[i] == 'name' then gname = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    local keep = nil
    local p = redis.call('XPENDING', KEYS[1], gname)
    if p[2] then
      keep = p[2]
    else
      local after = redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', 1)[1]
      if after then keep = after[1] end
    end
    if keep and (not floor or before(keep, floor)) then floor = keep end
  end
end
local len = redis.call('XLEN', KEYS[1])
local held = 0
local maxn, maxb = tonumber(ARGV[1]), tonumber(ARGV[2])
while len > 1 and (len > maxn or bytes > maxb) do
  local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
  if floor and not before(first[1], floor) then held = 1; break end
  bytes = bytes - #first[2][2]
  redis.call('XDEL', KEYS[1], first[1])
  len = len - 1
end
if bytes < 0 then bytes = 0 end
redis.call('SET', KEYS[2], bytes)
return {id, held}
";

/// The confirmation sweep of one pending confirmation (`model::sweep_confirm`): its page may be
/// present while a socket on a live node named its clientId or has not named any yet; after
/// `grace` of certain absence without a break, it is marked used and returned as expired.
/// Returns `{'keep'}` (may be present), `{'keep', absent since ms}`, `{'expired', call binding}`
/// or `{'drop'}` (used or gone).
/// KEYS: confirm, sockets. ARGV: clientId, now ms, grace ms, live node ids…
pub const EXPIRE_CONFIRM: &str = r"
local f = redis.call('HMGET', KEYS[1], 'k', 'u', 'a')
if not f[1] or f[2] == '1' then return {'drop'} end
local live = {}
for i = 4, #ARGV do live[ARGV[i]] = true end
local socks = redis.call('HGETALL', KEYS[2])
local total, identified, mine = 0, 0, 0
for i = 1, #socks, 2 do
  local field, n = socks[i], tonumber(socks[i + 1])
  local bar = string.find(field, '|', 1, true)
  local node = field
  if bar then node = string.sub(field, 1, bar - 1) end
  if live[node] and n > 0 then
    if bar then
      identified = identified + n
      if string.sub(field, bar + 1) == ARGV[1] then mine = mine + n end
    else
      total = total + n
    end
  end
end
if mine > 0 or total > identified then
  if f[3] then redis.call('HDEL', KEYS[1], 'a') end
  return {'keep'}
end
if not f[3] then
  redis.call('HSET', KEYS[1], 'a', ARGV[2])
  return {'keep', ARGV[2]}
end
if tonumber(ARGV[2]) - tonumber(f[3]) < tonumber(ARGV[3]) then return {'keep', f[3]} end
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

/// Keeps what a live page needs alive while this node holds a socket of its conversation
/// (heartbeat-scoped expiry): the conversation hash, the sockets hash, the current page's
/// manifest and the manifests of the page loads this node holds.
/// KEYS: conv, sockets. ARGV: ttl ms, manifest key prefix, clientIds…
pub const REFRESH: &str = r"
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
local current = redis.call('HGET', KEYS[1], 'current')
if current then redis.call('PEXPIRE', ARGV[2] .. current, ARGV[1]) end
for i = 3, #ARGV do redis.call('PEXPIRE', ARGV[2] .. ARGV[i], ARGV[1]) end
return 1
";

/// Records that a draining node closed the conversation's sockets (never creating the hash
/// without a TTL). KEYS: conv. ARGV: now ms, ttl ms.
pub const DRAINED: &str = r"
redis.call('HSET', KEYS[1], 'drained', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

/// Gives a lease back, only if this node still holds it. KEYS: lease. ARGV: node id.
pub const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
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
    pub refresh: Script,
    pub drained: Script,
    pub release: Script,
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
            refresh: Script::from_lua(REFRESH),
            drained: Script::from_lua(DRAINED),
            release: Script::from_lua(RELEASE),
        }
    }
}
