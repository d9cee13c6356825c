-- Functions shared by the scripts, written once and put before each script that needs one
-- (`scripts::Lua`). Each reads and writes only the keys it is given.
--
-- sockets(key): a conversation's sockets hash, parsed: one entry per field counting more than
--   0, `{node, client, n}`, `client` false for a node's own count (a field without `|`), else
--   the page load's clientId (`<node>|<clientId>`). Every script that reads the hash reads it
--   here.
-- summary_sockets(s), summary_add(conv, fields, delta, ttl), summary_set(conv, node, counts,
--   ttl): the conversation's sockets again, in one field `@` of its hash (`<field> <n>` per
--   line, the fields those of the sockets hash), so that a call's placement reads the
--   conversation in one command. Every count a node of this release moves in the sockets hash
--   it moves here too, in the same script; a node of 0.4.0 or older moves only the sockets
--   hash, which stays the whole truth for every other reader. `summary_sockets` parses it as
--   `sockets` does; `summary_add` moves `fields` by `delta` (a line reaching 0 goes, and the
--   field with the last) and answers the lines after the move, the conversation's `current`
--   (read in the same command) and whether every field had a line before it; `summary_set`
--   puts `node`'s lines anew (`counts`: field, n, …; none to take them out). With `ttl`, a
--   field written gives the hash that expiry (never a hash made without one).
--   `summary_entries(lines)` parses `summary_add`'s lines as `sockets` parses the hash.
-- set_of(list, first, last): the set of list[first..last] (node ids from ARGV).
-- left(gone, prefix, current, client, now, grace, ttl): page load `client` of a conversation is
--   gone (no socket on a live node): recorded in its gone set (clientId → when, ms), and its
--   manifest (`prefix .. client`) kept `grace` ms more unless it is the current page
--   (`Retention::gone_manifests`).
-- bound_gone(gone, prefix, current, kept, since, socks, live): (`socks`: the conversation's
--   sockets as `sockets` parsed them) a conversation's gone page
--   loads other than the current page keep a manifest: those gone before `since` are let go
--   from the set (their manifests expired; the current page stays in it, so that its manifest
--   gets the grace once another page takes over), and of the rest at most `kept`, the oldest to leave
--   going first, their manifests deleted; one that is back (a socket on a live node) is let be.
-- socket_nodes(key): the nodes holding sockets of a conversation (per-node counts), whether or
--   not they are live: a frame for a dead node reaches no one.
-- to_nodes(nodes, prefix, suffix, message): SPUBLISHes message on each node's channel of this
--   partition (prefix .. node .. suffix), which shares the script's slot; returns how many
--   subscribers received it.
-- conv_state(conv, socks, manifests, live, all, summary, texts): the conversation as the agent API sees it,
--   counting only sockets of live nodes, with D23's choice of the current page
--   (`model::current_page`). With `all`, every identified page's manifest `seq` and `rev` are
--   read (`st.info`), and the current page's `seq` comes from them (only a current page without
--   a socket is read apart). Without (a call's placement), a current page with a socket on a
--   live node takes its `seq` from the conversation's hash when `cm` there says it: `cm` is
--   `<clientId>\n<seq>`, written by put_manifest beside `current` when a manifest makes its page
--   current, and it holds only while it names the current page and the conversation's manifest
--   counter `seq` still (a manifest written since, by any node of any release, moves the
--   counter); otherwise the manifests are read as with `all`. With `summary` (no node of 0.4.0
--   or older is live, so every live node keeps it), the sockets are read from the hash's `@`
--   with the rest, in one HMGET, when they show the current page on a live node and `cm` is
--   right; else from the sockets hash as always. With `texts` (and `all`), the current page's
--   manifest text is read in the same command as its `seq` (`st.text`, false without one).
--   With `summary`, `st.due` is the conversation's `due` (false without one), read in the same
--   command: the time the partition's conversations by deadline hold it at (`bind`).
-- gcra(key, interval, burst, want, back): gives `back` unspent calls back to a tenant's rate
--   (never past now), then takes up to `want`, as many as the bucket holds now: `taken, 0`, or
--   `0, µs` until one would be allowed.
-- call_fields(call): a call's fields {v, c, d, n, s, t, o, x, w} (conversation ref, clientId,
--   deadline, waiting node, state, tool/kind/flags, outcome, cancel, the other nodes watching
--   it, space-separated), false each when it is gone (the cancel false once it finished). A
--   call is one string, pending (`p`, then the binding's lines, the waiting node, the
--   watchers, the cancel's length, then the cancel and the page message: the 10th field, the
--   page message, only in this form) or finished (`finish`), read with one GET; or, stored by
--   a node of 0.4.0 or beside one, a hash while pending, which the GET answers with WRONGTYPE
--   (caught), then one HMGET (not the page message, which only a timeout, a cancel or a
--   reconnecting page needs: `page_part`).
-- pending_string(f, watchers): a pending call's one string again (call_fields of that form),
--   with `watchers`.
-- to_watchers(f, prefix, suffix, message): SPUBLISHes an outcome message to each node watching
--   the call (`Calls::watch`) other than the waiting node, on its channel of this partition.
-- page_part(call, f, field): the page message (`f`) or the cancel (`x`) of a pending call, from
--   its string (read already), its hash or, for a call an older node stored during a rolling
--   upgrade (no `x` in its hash), from the `<call>:p` hash it kept beside the call.
-- finish(call, f, state, outcome): replaces a pending call (its hash or its string) with one
--   string, `state`, the binding's fields and the outcome joined by `\n`, keeping its time to
--   live, for the rest of its retention: the smallest form Redis keeps (no field names, no page
--   message), for a finished call that still answers `GET /calls/{id}` and a late or duplicate
--   result.
-- resolve(call, outcome, kept): how the confirmation of a call answered needs_confirmation
--   ended: `<ms>\n<final outcome>` beside the call (`<call>:r`), both kept `kept` ms from now
--   (`codec::parse_resolution` reads it); nothing when the call's key is gone.
-- is_async(summary): whether a call's tool/kind/flags (`codec::call_summary`) mark it async: its
--   outcome is announced as `call.result` (the flags end where the caller begins, at a `[`).
-- bind(k, a, due, hash): stores a call's binding with its page message and its cancel in one string
--   with its expiry (`a[13]` '1'), or in one hash (while a node of 0.4.0 or older is live: it
--   reads no other form); `k` is KEYS and `a` ARGV, whose first 7 and 13 values are the
--   binding's, in the order bind.lua lists them. A call stored as one string goes in its
--   conversation's calls by deadline (`due`, member the compact id), and the conversation in
--   its partition's conversations by deadline no later than that deadline: the conversation
--   hash's `due` (read by the caller, `due`; false when it has none) says where it is, and
--   both are written only when the call is due before it (a conversation's first call, or the
--   first since the sweep found it with none, due.lua): a call writes one entry, not two
--   (`hash` false: the conversation has no hash, and gets none; its calls wait in the
--   partition's set for the sweep all the same). A
--   call stored as a hash goes in the conversation's pending set and the partition's deadline
--   set, as 0.4.0 reads them. Neither per-conversation set gets an expiry here: every way a
--   call ends takes it out (a set whose last member goes is gone); the node holding the
--   conversation's pages gives the pending set the conversation's expiry with the rest
--   (refresh.lua), and the calls by deadline have none: the deadline sweep, which reaches
--   every conversation in the partition's set once its earliest deadline passed, is their
--   bound (an expiry could end them before a call due later, whose node died, is swept).
--   A traced call's page message (`t\n<traceparent>\n…`) also leaves its trace context in
--   `<call>:tp` for the call's time to live: what the webhook of its `call.result` and a sweep's
--   timeout link to (`Calls::call_trace`).
-- unlist(one_string, due, pending, deadlines, id, member): takes a call that ended out of the
--   set(s) its form put it in (`bind`): its conversation's calls by deadline (`id`, compact)
--   for a call stored as one string, else the pending set (`id`) and the partition's deadline
--   set (`member`).
local function socket_entry(out, field, n)
  if n > 0 then
    local bar = string.find(field, '|', 1, true)
    if bar then
      table.insert(out, {node = string.sub(field, 1, bar - 1), client = string.sub(field, bar + 1), n = n})
    else
      table.insert(out, {node = field, client = false, n = n})
    end
  end
end
local function sockets(key)
  local out = {}
  local flat = redis.call('HGETALL', key)
  for i = 1, #flat, 2 do socket_entry(out, flat[i], tonumber(flat[i + 1])) end
  return out
end
local function summary_parse(s)
  local out = {}
  if s then
    for field, n in string.gmatch(s, '([^\n ]+) (%-?%d+)') do table.insert(out, {field, tonumber(n)}) end
  end
  return out
end
local function summary_entries(list)
  local out = {}
  for _, e in ipairs(list) do socket_entry(out, e[1], e[2]) end
  return out
end
local function summary_sockets(s)
  return summary_entries(summary_parse(s))
end
local function summary_write(conv, list, ttl)
  local parts = {}
  for _, e in ipairs(list) do
    if e[2] > 0 then table.insert(parts, e[1] .. ' ' .. string.format('%d', e[2])) end
  end
  if #parts == 0 then
    redis.call('HDEL', conv, '@')
  else
    redis.call('HSET', conv, '@', table.concat(parts, '\n'))
    if ttl then redis.call('PEXPIRE', conv, ttl) end
  end
end
local function summary_add(conv, fields, delta, ttl)
  local h = redis.call('HMGET', conv, '@', 'current')
  local list = summary_parse(h[1])
  local all = true
  for _, field in ipairs(fields) do
    local found = false
    for _, e in ipairs(list) do
      if e[1] == field then e[2] = e[2] + delta; found = true; break end
    end
    if not found then table.insert(list, {field, delta}); all = false end
  end
  summary_write(conv, list, ttl)
  return list, h[2], all
end
local function summary_set(conv, node, counts, ttl)
  local list = {}
  for _, e in ipairs(summary_parse(redis.call('HGET', conv, '@'))) do
    local bar = string.find(e[1], '|', 1, true)
    local owner = bar and string.sub(e[1], 1, bar - 1) or e[1]
    if owner ~= node then table.insert(list, e) end
  end
  for i = 1, #counts, 2 do table.insert(list, {counts[i], tonumber(counts[i + 1])}) end
  summary_write(conv, list, ttl)
end
local function set_of(list, first, last)
  local s = {}
  for i = first, last do s[list[i]] = true end
  return s
end
local function socket_nodes(key)
  local out = {}
  for _, s in ipairs(sockets(key)) do
    if not s.client then table.insert(out, s.node) end
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
local function conv_state(conv, socks_key, manifests, live, all, summary, texts)
  local st = {total = 0, identified = 0, pages = {}, info = {}, skipped = {}, nodes = {}, text = false}
  local unknown = {}
  local h, socks
  if summary then
    h = redis.call('HMGET', conv, 'current', 'drained', 'seq', 'cm', '@', 'due')
    st.due = h[6] or false
    if h[1] and h[4] == h[1] .. '\n' .. (h[3] or '') then
      local s = summary_sockets(h[5])
      for _, e in ipairs(s) do
        if e.client == h[1] and live[e.node] then socks = s; break end
      end
    end
  else
    h = redis.call('HMGET', conv, 'current', 'drained', 'seq', 'cm')
  end
  for _, s in ipairs(socks or sockets(socks_key)) do
    if not s.client then table.insert(st.nodes, s.node) end
    if not live[s.node] then
      unknown[s.node] = true
    elseif s.client then
      st.pages[s.client] = (st.pages[s.client] or 0) + s.n
      st.identified = st.identified + s.n
    else
      st.total = st.total + s.n
    end
  end
  local current = h[1]
  st.effective = current
  st.drained = h[2]
  st.seq = ''
  local keeps = current and (st.pages[current] or st.total > st.identified)
  if not all and current and st.pages[current] and h[4] and h[4] == current .. '\n' .. (h[3] or '') then
    st.seq = h[3]
  else
    for client, _ in pairs(st.pages) do
      if texts then
        st.info[client] = redis.call('HMGET', manifests .. client, 's', 'r', 'm')
      else
        st.info[client] = redis.call('HMGET', manifests .. client, 's', 'r')
      end
    end
    if current and not keeps then
      local best, bestseq = nil, -1
      for client, f in pairs(st.info) do
        local s = tonumber(f[1] or '-1')
        if f[1] and s > bestseq then best, bestseq = client, s end
      end
      if best then st.effective = best end
    end
    if st.effective then
      local known = st.info[st.effective]
      if not known then
        if texts then known = redis.call('HMGET', manifests .. st.effective, 's', 'r', 'm')
        else known = {redis.call('HGET', manifests .. st.effective, 's')} end
      end
      st.seq = known[1] or ''
      st.text = known[3] or false
    end
  end
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
  local raw = redis.pcall('GET', call)
  if type(raw) == 'table' and raw.err then
    return redis.call('HMGET', call, 'v', 'c', 'd', 'n', 's', 't', 'o', 'x', 'w')
  end
  if not raw then
    return {false, false, false, false, false, false, false, false, false}
  end
  local p, at = {}, 1
  local lines = 9
  if string.sub(raw, 1, 2) == 'p\n' then lines = 12 end
  for i = 1, lines do
    local nl = string.find(raw, '\n', at, true)
    if not nl then p[i] = string.sub(raw, at); at = #raw + 2; break end
    p[i] = string.sub(raw, at, nl - 1)
    at = nl + 1
  end
  local rest = string.sub(raw, at)
  local v = p[2] .. '\n' .. p[3] .. '\n' .. p[4]
  local t = p[7] .. '\n' .. p[8] .. '\n' .. p[9]
  if lines == 12 then
    local xlen = tonumber(p[12])
    local w = p[11]
    if w == '' then w = false end
    return {v, p[5], p[6], p[10], 'p', t, false, string.sub(rest, 1, xlen), w, string.sub(rest, xlen + 1)}
  end
  return {v, p[5], p[6], false, p[1], t, rest, false, false}
end
local function to_watchers(f, prefix, suffix, message)
  if not f[9] then return end
  for node in string.gmatch(f[9], '%S+') do
    if node ~= f[4] then redis.call('SPUBLISH', prefix .. node .. suffix, message) end
  end
end
local function page_part(call, f, field)
  if f[5] ~= 'p' then return false end
  if f[10] then
    if field == 'x' then return f[8] end
    return f[10]
  end
  local from = call
  if not f[8] then from = call .. ':p' end
  if field == 'x' and f[8] then return f[8] end
  return redis.call('HGET', from, field)
end
local function pending_string(f, watchers)
  return table.concat({'p', f[1], f[2], f[3], f[6], f[4], watchers, tostring(#f[8])}, '\n') .. '\n' .. f[8] .. f[10]
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
  local flags = string.match(string.match(summary, '[^\n]*$'), '^[^%[]*')
  return string.find(flags, 'a', 1, true) ~= nil
end
local function bind(k, a, due, hash)
  local call = k[1]
  if a[13] == '1' then
    redis.call('SET', call, table.concat({'p', a[2], a[3], a[4], a[6], a[5], '', tostring(#a[8])}, '\n') .. '\n' .. a[8] .. a[7], 'PX', a[9])
    redis.call('ZADD', k[6], a[4], a[1])
    if not due or tonumber(a[4]) < tonumber(due) then
      redis.call('ZADD', k[7], 'LT', a[4], a[2])
      if hash then redis.call('HSET', k[5], 'due', a[4]) end
    end
  else
    redis.call('HSET', call, 'v', a[2], 'c', a[3], 'd', a[4], 'n', a[5], 's', 'p', 't', a[6], 'f', a[7], 'x', a[8])
    redis.call('PEXPIRE', call, a[9])
    redis.call('SADD', k[2], a[1])
    redis.call('ZADD', k[3], a[4], a[10])
  end
  if string.sub(a[7], 1, 2) == 't\n' then
    local trace = string.match(a[7], '^t\n([^\n]*)\n')
    if trace then redis.call('SET', call .. ':tp', trace, 'PX', a[9]) end
  end
end
local function unlist(one_string, due, pending, deadlines, id, member)
  if one_string then
    redis.call('ZREM', due, id)
  else
    redis.call('SREM', pending, id)
    redis.call('ZREM', deadlines, member)
  end
end
local function left(gone, prefix, current, client, now, grace, ttl)
  redis.call('ZADD', gone, now, client)
  redis.call('PEXPIRE', gone, ttl)
  if current ~= client then redis.call('PEXPIRE', prefix .. client, grace) end
end
local function bound_gone(gone, prefix, current, kept, since, socks, live)
  local current_left = current and redis.call('ZSCORE', gone, current)
  redis.call('ZREMRANGEBYSCORE', gone, '-inf', '(' .. since)
  if current_left then redis.call('ZADD', gone, current_left, current) end
  local back = {}
  for _, s in ipairs(socks) do
    if s.client and live[s.node] then back[s.client] = true end
  end
  local others = {}
  for _, id in ipairs(redis.call('ZRANGE', gone, 0, -1)) do
    if id ~= current and not back[id] then table.insert(others, id) end
  end
  for i = 1, #others - kept do
    redis.call('ZREM', gone, others[i])
    redis.call('DEL', prefix .. others[i])
  end
end
