//! The Lua scripts. Each touches the keys of one hash tag only (a conversation's partition, or
//! a tenant), so it runs atomically on one Redis Cluster shard; each is the single round trip of
//! its operation. Parts that several scripts share are Lua functions in [`PRELUDE`], so each rule
//! is written once here too. They are hashed and run by `run.rs`. The scripts of page sockets
//! and manifests are in [`pages`].

mod pages;

pub use pages::*;

/// Functions shared by the scripts below.
///
/// - `socket_nodes(socks)`: the nodes holding sockets of a conversation (per-node counts, the
///   fields without `|`), whether or not they are live: a frame for a dead node reaches no one.
/// - `to_nodes(nodes, prefix, suffix, message)`: `SPUBLISH`es `message` on each node's channel
///   of this partition (`prefix .. node .. suffix`), which shares the script's slot; returns how
///   many subscribers received it.
/// - `conv_state(conv, socks, manifests, live)`: the conversation as the agent API sees it,
///   counting only sockets of live nodes, with D23's choice of the current page
///   (`model::current_page`). The current page's manifest `seq` comes from the manifests
///   already read for the identified pages; only a current page without a socket is read apart.
/// - `gcra(key, interval, burst, want, back)`: gives `back` unspent calls back to a tenant's
///   rate (never past now), then takes up to `want`, as many as the bucket holds now:
///   `taken, 0`, or `0, µs` until one would be allowed.
/// - `call_fields(call)`: a call's fields `{v, c, d, n, s, t, o, x, w}` (conversation ref,
///   clientId, deadline, waiting node, state, tool/kind/flags, outcome, cancel, the other
///   nodes watching it, space-separated), from its hash
///   while it is pending or from its packed string once it finished (`false` each when it is
///   gone; the cancel `false` once it finished). Not the page message, which may be large and
///   which only a timeout, a cancel or a reconnecting page needs. One `HMGET` while pending;
///   a finished call's string answers it with `WRONGTYPE` (caught), then `TYPE` and `GET`.
/// - `to_watchers(f, prefix, suffix, message)`: `SPUBLISH`es an outcome message to each node
///   watching the call (`Calls::watch`) other than the waiting node, on its channel of this
///   partition.
/// - `page_part(call, f, field)`: the page message (`f`) or the cancel (`x`) of a pending call,
///   from its hash or, for a call an older node stored during a rolling upgrade (no `x` in its
///   hash), from the `<call>:p` hash it kept beside the call.
/// - `finish(call, f, state, outcome)`: replaces a pending call's hash with one string,
///   `state`, the binding's fields and the outcome joined by `\n`, keeping its time to live, for
///   the rest of its retention: the smallest form Redis keeps (no hash, no field names), for a
///   finished call that still answers `GET /calls/{id}` and a late or duplicate result.
/// - `is_async(summary)`: whether a call's tool/kind/flags (`codec::call_summary`) mark it
///   async: its outcome is announced as `call.result`.
/// - `bind(call, pending, deadlines, a)`: stores a call's binding with its page message and its
///   `cancel` in one hash, in the conversation's pending set and the partition's deadline set
///   (`a` is ARGV, whose first 10 values are the binding's, in the order [`BIND`] documents).
pub const PRELUDE: &str = r"
local function socket_nodes(socks)
  local out = {}
  local flat = redis.call('HGETALL', socks)
  for i = 1, #flat, 2 do
    if not string.find(flat[i], '|', 1, true) and tonumber(flat[i + 1]) > 0 then
      table.insert(out, flat[i])
    end
  end
  return out
end
local function to_nodes(nodes, prefix, suffix, message)
  local reached = 0
  for _, node in ipairs(nodes) do
    reached = reached + redis.call('SPUBLISH', prefix .. node .. suffix, message)
  end
  return reached
end
local function conv_state(conv, socks_key, manifests, live)
  local socks = redis.call('HGETALL', socks_key)
  local st = {total = 0, identified = 0, pages = {}, info = {}, skipped = {}, nodes = {}}
  local unknown = {}
  for i = 1, #socks, 2 do
    local field, n = socks[i], tonumber(socks[i + 1])
    local bar = string.find(field, '|', 1, true)
    local node = field
    if bar then node = string.sub(field, 1, bar - 1) end
    if n > 0 and not bar then table.insert(st.nodes, node) end
    if n > 0 and not live[node] then unknown[node] = true end
    if live[node] and n > 0 then
      if bar then
        local client = string.sub(field, bar + 1)
        st.pages[client] = (st.pages[client] or 0) + n
        st.identified = st.identified + n
      else
        st.total = st.total + n
      end
    end
  end
  for client, _ in pairs(st.pages) do
    st.info[client] = redis.call('HMGET', manifests .. client, 's', 'r')
  end
  local h = redis.call('HMGET', conv, 'current', 'drained')
  local current = h[1]
  st.effective = current
  if current and not st.pages[current] and st.total <= st.identified then
    local best, bestseq = nil, -1
    for client, f in pairs(st.info) do
      local s = tonumber(f[1] or '-1')
      if f[1] and s > bestseq then best, bestseq = client, s end
    end
    if best then st.effective = best end
  end
  st.seq = ''
  if st.effective then
    local known = st.info[st.effective]
    if known then st.seq = known[1] or ''
    else st.seq = redis.call('HGET', manifests .. st.effective, 's') or '' end
  end
  st.drained = h[2]
  for node, _ in pairs(unknown) do table.insert(st.skipped, node) end
  return st
end
local function gcra(key, interval_us, burst, want, back)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local interval = tonumber(interval_us)
  local tolerance = interval * (tonumber(burst) - 1)
  local tat = tonumber(redis.call('GET', key) or now) - tonumber(back) * interval
  if tat < now then tat = now end
  if now < tat - tolerance then
    if tonumber(back) > 0 then
      redis.call('SET', key, string.format('%d', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
    end
    return 0, math.floor(tat - tolerance - now)
  end
  local n = math.min(tonumber(want), math.floor((now + tolerance - tat) / interval) + 1)
  local new_tat = math.floor(tat + n * interval)
  redis.call('SET', key, string.format('%d', new_tat), 'PX', math.floor((new_tat - now) / 1000) + 1000)
  return n, 0
end
local function call_fields(call)
  local h = redis.pcall('HMGET', call, 'v', 'c', 'd', 'n', 's', 't', 'o', 'x', 'w')
  if not h.err then return h end
  if redis.call('TYPE', call)['ok'] ~= 'string' then
    return {false, false, false, false, false, false, false, false, false}
  end
  local p = {}
  for part in string.gmatch(redis.call('GET', call) .. '\n', '([^\n]*)\n') do table.insert(p, part) end
  return {p[2] .. '\n' .. p[3] .. '\n' .. p[4], p[5], p[6], false, p[1],
          p[7] .. '\n' .. p[8] .. '\n' .. p[9], table.concat(p, '\n', 10), false, false}
end
local function to_watchers(f, prefix, suffix, message)
  if not f[9] then return end
  for node in string.gmatch(f[9], '%S+') do
    if node ~= f[4] then redis.call('SPUBLISH', prefix .. node .. suffix, message) end
  end
end
local function page_part(call, f, field)
  if f[5] ~= 'p' then return false end
  local from = call
  if not f[8] then from = call .. ':p' end
  if field == 'x' and f[8] then return f[8] end
  return redis.call('HGET', from, field)
end
local function finish(call, f, state, outcome)
  if f[5] == 'p' and not f[8] then redis.call('DEL', call .. ':p') end
  redis.call('SET', call, table.concat({state, f[1], f[2], f[3], f[6], outcome}, '\n'), 'KEEPTTL')
end
local function resolve(call, outcome, kept)
  if not call or redis.call('EXISTS', call) == 0 then return end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', call .. ':r', now .. '\n' .. outcome, 'PX', kept)
  redis.call('PEXPIRE', call, kept)
end
local function is_async(summary)
  return string.find(string.match(summary, '[^\n]*$'), 'a', 1, true) ~= nil
end
local function bind(call, pending, deadlines, a)
  redis.call('HSET', call, 'v', a[2], 'c', a[3], 'd', a[4], 'n', a[5], 's', 'p', 't', a[6], 'f', a[7], 'x', a[8])
  redis.call('PEXPIRE', call, a[9])
  redis.call('SADD', pending, a[1])
  redis.call('PEXPIRE', pending, a[9])
  redis.call('ZADD', deadlines, a[4], a[10])
end
";

/// Stores a call's binding (with its page message and its `cancel`, built in Rust, for a
/// timeout or an agent's cancel), then publishes the page message to every node holding a socket
/// of the conversation.
/// KEYS: call, pending set, deadline set, sockets. ARGV: call id and clientId in their compact
/// forms (`codec::compact_id`) where noted: call id (compact), conversation ref, clientId
/// (compact), deadline ms, node, tool/kind/flags, page message, cancel message, ttl ms, deadline member,
/// node channel prefix, partition suffix.
pub const BIND: &str = r"
bind(KEYS[1], KEYS[2], KEYS[3], ARGV)
to_nodes(socket_nodes(KEYS[4]), ARGV[11], ARGV[12], ARGV[7])
return 1
";

/// An agent's call in one round trip: the conversation read, the tenant's rate and the bind.
/// The caller names the page it expects to be current (and its manifest's `seq`), read before
/// and kept per conversation; when the conversation changed since, nothing is taken or stored
/// and the answer is `{'stale'}` (read again, then retry). Sockets on a node that is neither in
/// the caller's live set nor known dead answer `{'unknown', nodes…}` (read the live set again,
/// then retry). Otherwise the rate is taken (when asked here), and `model::accepts_calls`
/// decides between `{'no_page'}` and the bind.
/// KEYS: call, pending set, deadline set, sockets, conversation, rate (or the conversation again
/// when the rate is taken elsewhere). ARGV: the 12 of [`BIND`], then manifest prefix, expected
/// clientId or '', expected seq or '', now ms, reconnect grace ms, rate interval µs or '',
/// burst, how many live node ids follow, the live node ids, then the nodes known dead.
/// The page message is published before the bind (a node hears it only once the script ended):
/// when pages are connected but no node's channel took it (a subscription lost in a failover or
/// a slot move, the node not yet subscribed again), nothing is bound, the rate token is given
/// back and the answer is `{'unreached'}`: the agent is told 503, never a timeout for a frame
/// no page received.
/// Returns `{'ok'}`, `{'stale'}`, `{'unknown', nodes…}`, `{'no_page'}`, `{'unreached'}` or
/// `{'rate', µs}`.
pub const PLACE: &str = r"
local live, dead = {}, {}
local nlive = tonumber(ARGV[20])
for i = 21, 20 + nlive do live[ARGV[i]] = true end
for i = 21 + nlive, #ARGV do dead[ARGV[i]] = true end
local st = conv_state(KEYS[5], KEYS[4], ARGV[13], live)
local unknown = {}
for _, node in ipairs(st.skipped) do
  if not dead[node] then table.insert(unknown, node) end
end
if #unknown > 0 then return {'unknown', unpack(unknown)} end
if (st.effective or '') ~= ARGV[14] or st.seq ~= ARGV[15] then return {'stale'} end
if ARGV[18] ~= '' then
  local _, wait = gcra(KEYS[6], ARGV[18], ARGV[19], 1, 0)
  if wait > 0 then return {'rate', tostring(wait)} end
end
local reconnecting = st.total == 0 and st.drained and tonumber(ARGV[16]) - tonumber(st.drained) < tonumber(ARGV[17])
if not st.effective or (st.total == 0 and not reconnecting) then return {'no_page'} end
if to_nodes(st.nodes, ARGV[11], ARGV[12], ARGV[7]) == 0 and st.total > 0 then
  if ARGV[18] ~= '' then gcra(KEYS[6], ARGV[18], ARGV[19], 0, 1) end
  return {'unreached'}
end
bind(KEYS[1], KEYS[2], KEYS[3], ARGV)
return {'ok'}
";

/// Checks a page's result against the binding (`model::check_result`) and marks the call
/// answered, keeping only what a finished call must still answer, packed (`finish`: the page
/// message, the cancel and the waiting node go, and so does its deadline entry); stores the confirmId binding of a needs_confirmation (with the call's id and tool,
/// so that the confirmation is announced with its tool however late it comes); sends the
/// outcome to the waiting node. An async call's change is recorded in the outbox, to be
/// announced as `call.result` (`change::Change::Call`). A call key missing here is `unknown_id`.
/// KEYS: call, confirm, pending set, deadline set, outbox. ARGV: conversation ref, clientId, outcome,
/// confirmId or '', confirm ttl ms, call id, node channel prefix, partition suffix, outcome
/// message, deadline member, then the call id and the clientId in their compact forms (as the
/// call's hash and the pending set hold them), then '' or, for a result submitted again after
/// an unknown outcome, the ms at which the node received it: the deadline is judged then, and
/// the same outcome already recorded is `before` (the earlier submission was applied), then the
/// call's outbox name and entry.
/// A `needs_confirmation` result keeps its call as long as its confirmation (the confirm hash
/// names the call's key, `ck`, for the resolution).
/// Returns `{'ok' or 'before', tool/kind/flags, deadline, node}` or a rejection's code.
pub const RESULT: &str = r"
local f = call_fields(KEYS[1])
if not f[1] then return {'unknown_id'} end
if f[1] ~= ARGV[1] or f[2] ~= ARGV[12] then return {'mismatch'} end
if f[5] == 'a' then
  if ARGV[13] ~= '' and f[7] == ARGV[3] then return {'before', f[6], f[3], f[4] or ''} end
  return {'duplicate'}
end
if f[5] == 't' then return {'late'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[13] ~= '' and tonumber(ARGV[13]) < now then now = tonumber(ARGV[13]) end
if now > tonumber(f[3]) then return {'late'} end
finish(KEYS[1], f, 'a', ARGV[3])
redis.call('SREM', KEYS[3], ARGV[11])
redis.call('ZREM', KEYS[4], ARGV[10])
if ARGV[4] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'k', ARGV[6], 't', f[6], 'c', ARGV[2], 'u', '0', 'ck', KEYS[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[5]) then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
end
if is_async(f[6]) then redis.call('HSET', KEYS[5], ARGV[14], ARGV[15]) end
redis.call('SPUBLISH', ARGV[7] .. f[4] .. ARGV[8], ARGV[9])
to_watchers(f, ARGV[7], ARGV[8], ARGV[9])
return {'ok', f[6], f[3], f[4]}
";

/// Marks a pending call timed out (packed as a result is), records its change in the outbox (to
/// be announced as `call.timeout`), sends the pages its stored cancel and the waiting node the
/// outcome.
/// KEYS: call, pending set, deadline set, sockets, outbox. ARGV: call id (compact), timeout
/// outcome, node channel prefix, partition suffix, outcome message, deadline member, the call's
/// outbox name and entry.
/// Returns `{'ok', conversation ref, clientId, deadline, node, tool/kind/flags}` or the state.
pub const TIMEOUT: &str = r"
local f = call_fields(KEYS[1])
if not f[1] then return {'missing'} end
if f[5] ~= 'p' then return {f[5]} end
local cancel = page_part(KEYS[1], f, 'x')
finish(KEYS[1], f, 't', ARGV[2])
redis.call('HSET', KEYS[5], ARGV[7], ARGV[8])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[6])
if cancel then to_nodes(socket_nodes(KEYS[4]), ARGV[3], ARGV[4], cancel) end
redis.call('SPUBLISH', ARGV[3] .. f[4] .. ARGV[4], ARGV[5])
to_watchers(f, ARGV[3], ARGV[4], ARGV[5])
return {'ok', f[1], f[2], f[3], f[4], f[6]}
";

/// Sends the stored protocol cancel of a pending call to the pages; returns the call.
/// KEYS: call, sockets. ARGV: node channel prefix, partition suffix.
/// Returns `{conversation ref, clientId, deadline, node, tool/kind/flags, state, outcome}`.
pub const CANCEL: &str = r"
local f = call_fields(KEYS[1])
if not f[1] then return {} end
local cancel = page_part(KEYS[1], f, 'x')
if cancel then to_nodes(socket_nodes(KEYS[2]), ARGV[1], ARGV[2], cancel) end
return {f[1], f[2], f[3], f[4] or '', f[6], f[5], f[7] or ''}
";

/// Adds this node to the watchers of a pending call (its outcome message then comes here too,
/// from `RESULT` or `TIMEOUT`). KEYS: call. ARGV: node id.
/// Returns `{'pending', conversation ref}`, `{'ended'}` or `{'missing'}`.
pub const WATCH: &str = r"
local f = call_fields(KEYS[1])
if not f[1] then return {'missing'} end
if f[5] ~= 'p' then return {'ended'} end
local w = f[9] or ''
if not string.find(' ' .. w .. ' ', ' ' .. ARGV[1] .. ' ', 1, true) then
  redis.call('HSET', KEYS[1], 'w', w .. ' ' .. ARGV[1])
end
return {'pending', f[1]}
";

/// A call, pending or finished (`call_fields`), with how its confirmation ended (`resolve`).
/// KEYS: call.
/// Returns `{conversation ref, clientId, deadline, node, tool/kind/flags, state, outcome,
/// resolution}` (the resolution `at ms\noutcome`, or ''), or `{}` when there is none.
pub const READ_CALL: &str = r"
local f = call_fields(KEYS[1])
if not f[1] then return {} end
return {f[1], f[2], f[3], f[4] or '', f[6], f[5], f[7] or '', redis.call('GET', KEYS[1] .. ':r') or ''}
";

/// Accepts a confirmed once, from the page that sent the needs_confirmation
/// (`model::check_confirm`); returns the id and tool/kind/flags of the call that carried it. A
/// missing key is `unknown_confirm`; the caller tells a confirmId of another conversation
/// through its index. `u` is `0` pending, `c` confirmed by its page, `1` expired by the sweep (or
/// confirmed, by an earlier build). Submitted `again` (the node did not learn the outcome of an
/// earlier submission), a confirmation its page confirmed answers as accepted. Accepted, its
/// change is recorded in the outbox, to be announced as `confirmation.resolved`.
/// The page's final outcome is written to its call (`resolve`), kept from then on for ARGV[6].
/// KEYS: confirm, outbox. ARGV: clientId, '' or 'again', outbox name, outbox entry, final
/// outcome, ms the call is kept after.
pub const CONFIRM: &str = r"
local f = redis.call('HMGET', KEYS[1], 'k', 'c', 'u', 't', 'ck')
if not f[1] then return {'unknown_confirm'} end
if f[2] ~= ARGV[1] then return {'mismatch'} end
if f[3] == 'c' and ARGV[2] == 'again' then return {'ok', f[1], f[4] or ''} end
if f[3] == '1' or f[3] == 'c' then return {'duplicate'} end
redis.call('HSET', KEYS[1], 'u', 'c')
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
resolve(f[5], ARGV[5], ARGV[6])
return {'ok', f[1], f[4] or ''}
";

/// GCRA: gives back unspent calls of the tenant's rate, then takes up to `want` at once (a
/// node's reserve on Redis Cluster, `rate::Reserves`). Returns `{taken, 0}`, or `{0, µs}` until
/// one call would be allowed. KEYS: rate. ARGV: emission interval µs, burst, want, back.
pub const GCRA: &str = r"
local taken, wait = gcra(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
return {taken, wait}
";

/// Appends an event to the tenant's stream and publishes it to live readers, then trims the
/// oldest events beyond the retention in count and in bytes (`model::events_to_trim`), never
/// past an event the webhook group has not read and acknowledged: those stay until delivered or
/// dead-lettered. Returns the event id and how many events were held back from trimming. With
/// a third key (`Events::emit_once`), an event already emitted under that name is not emitted
/// again: its id is returned with a third element, and the name is kept ARGV[5] ms.
/// KEYS: stream, its byte counter[, once key]. ARGV: max count, max bytes, event, channel[, ttl].
pub const EMIT: &str = r"
local function before(a, b)
  local am, as = string.match(a, '(%d+)-(%d+)')
  local bm, bs = string.match(b, '(%d+)-(%d+)')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
if KEYS[3] then
  local seen = redis.call('GET', KEYS[3])
  if seen then return {seen, '0', 'seen'} end
end
local id = redis.call('XADD', KEYS[1], '*', 'e', ARGV[3])
if KEYS[3] then redis.call('SET', KEYS[3], id, 'PX', ARGV[5]) end
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
/// Returns `{'keep'}` (may be present), `{'keep', absent since ms}`, `{'expired', call id,
/// tool/kind/flags}`
/// or `{'drop'}` (used or gone). Expired, its change is recorded in the outbox, to be
/// announced as `confirmation.resolved`.
/// Expired, the refusal is written to its call as its final outcome (`resolve`).
/// KEYS: confirm, sockets, outbox. ARGV: clientId, now ms, grace ms, outbox name, outbox
/// entry, the expiry's outcome, ms the call is kept after, live node ids…
pub const EXPIRE_CONFIRM: &str = r"
local f = redis.call('HMGET', KEYS[1], 'k', 'u', 'a', 't', 'ck')
if not f[1] or f[2] == '1' or f[2] == 'c' then return {'drop'} end
local live = {}
for i = 8, #ARGV do live[ARGV[i]] = true end
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
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
resolve(f[5], ARGV[6], ARGV[7])
return {'expired', f[1], f[4] or ''}
";

/// The page messages of the conversation's pending calls; forgets finished ones.
/// KEYS: pending set. ARGV: call key prefix of the conversation's partition.
pub const PENDING: &str = r"
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local frame = page_part(ARGV[1] .. id, call_fields(ARGV[1] .. id), 'f')
  if frame then table.insert(out, frame) else redis.call('SREM', KEYS[1], id) end
end
return out
";

/// Gives a lease back, only if this node still holds it. KEYS: lease. ARGV: node id.
pub const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// Writes a tenant's record if it is as expected (`catalog::check`): `absent`, or at the given
/// version. The new version is the catalog's next revision; the change is announced.
/// KEYS: catalog, revision. ARGV: id, record, expected ('absent' or a version), channel.
/// Returns `{'ok', version}` or `{'exists'}`, `{'missing'}`, `{'stale'}`.
pub const CATALOG_PUT: &str = r"
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local version = nil
if cur then version = string.match(cur, '^(%d+)') end
if ARGV[3] == 'absent' then
  if cur then return {'exists'} end
else
  if not cur then return {'missing'} end
  if version ~= ARGV[3] then return {'stale'} end
end
local v = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], v .. '\n' .. ARGV[2])
redis.call('SPUBLISH', ARGV[4], ARGV[1])
return {'ok', tostring(v)}
";

/// Removes a tenant's record if it is at the given version; the change is announced.
/// KEYS: catalog, revision. ARGV: id, version, channel.
/// Returns `{'ok'}`, `{'missing'}` or `{'stale'}`.
pub const CATALOG_REMOVE: &str = r"
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return {'missing'} end
if string.match(cur, '^(%d+)') ~= ARGV[2] then return {'stale'} end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
redis.call('SPUBLISH', ARGV[3], ARGV[1])
return {'ok'}
";

/// Counted sessions (bounded hosted MCP sessions): a sorted set of the tenant's and one of the
/// holder's, member the session id, score when it lapses; lapsed members are dropped first.
/// `take` counts the session unless a set is full (a session counted already is only kept),
/// `keep` restarts the time of a counted one, `give` drops it.
/// KEYS: tenant set, holder set. ARGV: take|keep|give, id, tenant bound, holder bound, ttl
/// ms (time is Redis's own). Returns `ok`, `holder` or `tenant` (the bound that refused).
pub const PLACES: &str = r#"
local op, id = ARGV[1], ARGV[2]
if op == 'give' then
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  return 'ok'
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local counted = redis.call('ZSCORE', KEYS[1], id)
if op == 'keep' and not counted then return 'ok' end
if op == 'take' and not counted then
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 'holder' end
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 'tenant' end
end
local lapse = now + tonumber(ARGV[5])
redis.call('ZADD', KEYS[1], lapse, id)
redis.call('ZADD', KEYS[2], lapse, id)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 'ok'
"#;
