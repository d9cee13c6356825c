//! The scripts of page sockets and manifests: a conversation's presence (sockets per node and
//! per page load), its latest manifests and current page, read and kept alive.

/// Keeps a page's latest manifest (a hash per page load: `m` the manifest, `s` its order, `r`
/// its revision) and makes the page current (only if none is, when re-publishing after Redis
/// lost its data). Per-page-load state lives in that key alone, so it goes when its page does.
/// With an outbox key, the change is recorded there, to be announced as `page.manifest`.
/// KEYS: manifest, conv[, outbox]. ARGV: manifest, rev, ttl ms, '1' to keep an existing current,
/// clientId[, outbox name, outbox entry].
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
if KEYS[3] then redis.call('HSET', KEYS[3], ARGV[6], ARGV[7]) end
return 1
";

/// The conversation as the agent API sees it (`conv_state`).
/// KEYS: conv, sockets. ARGV: manifest key prefix, live node ids…
/// Returns: effective clientId or '', its manifest or '', open sockets, when a draining node
/// closed its sockets (ms, or ''), the nodes with sockets that are not in the live set
/// (space-separated: the caller refreshes its live set and asks again), the effective page's
/// manifest `seq` or '', then per connected page: clientId, sockets, rev or ''.
pub const CONV_READ: &str = r"
local live = {}
for i = 2, #ARGV do live[ARGV[i]] = true end
local st = conv_state(KEYS[1], KEYS[2], ARGV[1], live)
local manifest = false
if st.effective then manifest = redis.call('HGET', ARGV[1] .. st.effective, 'm') end
local out = {st.effective or '', manifest or '', tostring(st.total), st.drained or '', table.concat(st.skipped, ' '), st.seq}
for client, n in pairs(st.pages) do
  table.insert(out, client)
  table.insert(out, tostring(n))
  table.insert(out, st.info[client][2] or '')
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

/// A page socket closed, released once under its name: counts it down (`<node>`, and
/// `<node>|<clientId>` for an identified socket; fields reaching 0 removed). Its page is gone
/// when no socket of its clientId is left on a live node (`model::Presence`); with an outbox
/// key, the page's leaving is then recorded there, to be announced as `page.disconnected`. The
/// release's marker keeps what it meant: asked again, it changes nothing and answers the same.
/// KEYS: sockets, release marker[, outbox]. ARGV: node, clientId or '', marker ttl ms, outbox
/// name, outbox entry, live node ids… Returns 1 when the page is gone, else 0.
pub const LEAVE: &str = r"
local done = redis.call('GET', KEYS[2])
if done then return tonumber(done) end
local fields = {ARGV[1]}
if ARGV[2] ~= '' then table.insert(fields, ARGV[1] .. '|' .. ARGV[2]) end
for _, field in ipairs(fields) do
  if redis.call('HINCRBY', KEYS[1], field, -1) <= 0 then redis.call('HDEL', KEYS[1], field) end
end
local gone = 0
if ARGV[2] ~= '' then
  gone = 1
  local live = {}
  for i = 6, #ARGV do live[ARGV[i]] = true end
  local socks = redis.call('HGETALL', KEYS[1])
  for i = 1, #socks, 2 do
    local bar = string.find(socks[i], '|', 1, true)
    if bar and tonumber(socks[i + 1]) > 0 and string.sub(socks[i], bar + 1) == ARGV[2]
        and live[string.sub(socks[i], 1, bar - 1)] then
      gone = 0
      break
    end
  end
end
if gone == 1 and KEYS[3] then redis.call('HSET', KEYS[3], ARGV[4], ARGV[5]) end
redis.call('SET', KEYS[2], gone, 'PX', ARGV[3])
return gone
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
