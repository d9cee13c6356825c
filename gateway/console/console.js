// The operator's console: a plain ES module, no build step, no other origin. Everything it
// shows or does goes through the admin API of the gateway that served it (same origin), signed
// with the admin key the operator typed, kept in this tab's session storage only.

const KEY_STORE = 'toolmark.adminKey';
const POLL_MS = 2000;
const HISTORY = 60; // sparkline points: two minutes at one poll every 2 s
const LOG_MAX = 300;

const $ = (id) => document.getElementById(id);

const state = {
  key: sessionStorage.getItem(KEY_STORE) ?? '',
  tenants: [], // as GET /admin/v1/tenants lists them
  stats: null, // the last GET /admin/v1/stats
  history: new Map(), // tenant id -> {conn: number[], cps: number[]}
  selected: null, // {tenant, etag} of the opened tenant
  poll: null,
  polling: false,
  streams: new Map(), // name -> AbortController of a running event stream
  view: 'tenants',
};

// ---------------------------------------------------------------- DOM helpers

/** An element with attributes (`on…` are listeners) and children (text or nodes). */
function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

const SVG = 'http://www.w3.org/2000/svg';

/** A small SVG line of `values` (newest last), scaled to its own maximum. */
function sparkline(values, label) {
  const w = 120;
  const ht = 28;
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('viewBox', `0 0 ${w} ${ht}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  const base = document.createElementNS(SVG, 'line');
  base.setAttribute('x1', '0');
  base.setAttribute('x2', String(w));
  base.setAttribute('y1', String(ht - 1));
  base.setAttribute('y2', String(ht - 1));
  svg.append(base);
  if (values.length > 1) {
    const max = Math.max(...values, 1);
    const step = w / (HISTORY - 1);
    const x0 = w - step * (values.length - 1);
    const points = values
      .map((v, i) => `${(x0 + i * step).toFixed(1)},${(ht - 2 - (v / max) * (ht - 4)).toFixed(1)}`)
      .join(' ');
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', points);
    svg.append(line);
  }
  return svg;
}

function setStatus(text) {
  $('status').textContent = text;
}

function fmtRate(n) {
  return (n ?? 0).toFixed(n >= 10 ? 0 : 1);
}

function countsList(obj, empty) {
  const entries = Object.entries(obj ?? {});
  if (entries.length === 0) return h('p', { class: 'hint' }, empty);
  return h('ul', { class: 'counts' }, entries.map(([k, v]) => h('li', {}, `${k} ${v}`)));
}

// ---------------------------------------------------------------- the admin API

class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail ?? `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

function describe(err) {
  if (err instanceof ApiError) {
    const code = err.problem?.code ? ` ${err.problem.code}` : '';
    const at = err.problem?.pointer ? ` at ${err.problem.pointer}` : '';
    return `${err.status}${code}: ${err.message}${at}`;
  }
  return `the admin API did not answer (${err.message})`;
}

/** Calls the admin API with the admin key; resolves to {data, etag}, throws ApiError. */
async function api(method, path, body, headers = {}) {
  const res = await fetch(path, {
    method,
    cache: 'no-store',
    credentials: 'omit',
    headers: {
      Authorization: `Bearer ${state.key}`,
      Accept: 'application/json',
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) {
    const err = new ApiError(res.status, data);
    if (res.status === 401) signOut('The admin key was refused (401 unauthorized): sign in again.');
    throw err;
  }
  return { data, etag: res.headers.get('etag') };
}

/**
 * Follows a Server-Sent Events stream of the admin API with fetch (an EventSource cannot send
 * the Authorization header), calling onEvent({id, event, data}) for each; reconnects after
 * the last id when the stream ends, until `name` is stopped.
 */
function follow(name, path, onEvent, onError) {
  stopStream(name);
  const ctl = new AbortController();
  state.streams.set(name, ctl);
  let lastId = '';
  const run = async () => {
    while (!ctl.signal.aborted) {
      try {
        const res = await fetch(path, {
          cache: 'no-store',
          credentials: 'omit',
          signal: ctl.signal,
          headers: {
            Authorization: `Bearer ${state.key}`,
            Accept: 'text/event-stream',
            ...(lastId ? { 'Last-Event-ID': lastId } : {}),
          },
        });
        if (!res.ok) {
          const problem = await res.json().catch(() => null);
          if (res.status === 401) signOut('The admin key was refused (401 unauthorized): sign in again.');
          throw new ApiError(res.status, problem);
        }
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf = (buf + value).replace(/\r\n?/g, '\n');
          let end;
          while ((end = buf.indexOf('\n\n')) >= 0) {
            const ev = parseEvent(buf.slice(0, end));
            buf = buf.slice(end + 2);
            if (ev) {
              if (ev.id) lastId = ev.id;
              onEvent(ev);
            }
          }
        }
      } catch (err) {
        if (ctl.signal.aborted) return;
        onError?.(err);
        if (err instanceof ApiError && err.status < 500) return;
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  };
  run();
}

function parseEvent(block) {
  const ev = { id: '', event: 'message', data: '' };
  const data = [];
  for (const line of block.split('\n')) {
    if (!line || line.startsWith(':')) continue;
    const c = line.indexOf(':');
    const field = c < 0 ? line : line.slice(0, c);
    let v = c < 0 ? '' : line.slice(c + 1);
    if (v.startsWith(' ')) v = v.slice(1);
    if (field === 'data') data.push(v);
    else if (field === 'id') ev.id = v;
    else if (field === 'event') ev.event = v;
  }
  if (data.length === 0) return null;
  ev.data = data.join('\n');
  return ev;
}

function stopStream(name) {
  state.streams.get(name)?.abort();
  state.streams.delete(name);
}

// ---------------------------------------------------------------- sign-in

async function signIn(event) {
  event.preventDefault();
  const typed = $('admin-key').value.trim();
  const error = $('sign-in-error');
  error.textContent = '';
  if (!typed) {
    error.textContent = 'Enter an admin key.';
    $('admin-key').focus();
    return;
  }
  state.key = typed;
  try {
    const { data } = await api('GET', '/admin/v1/stats');
    sessionStorage.setItem(KEY_STORE, typed);
    $('admin-key').value = '';
    await enter(data);
  } catch (err) {
    state.key = '';
    error.textContent =
      err instanceof ApiError && err.status === 401
        ? 'This admin key was refused (401 unauthorized). Check it and try again.'
        : `Could not sign in: ${describe(err)}`;
    $('admin-key').focus();
  }
}

function signOut(message = '') {
  clearInterval(state.poll);
  state.poll = null;
  for (const name of [...state.streams.keys()]) stopStream(name);
  sessionStorage.removeItem(KEY_STORE);
  state.key = '';
  state.selected = null;
  $('app').hidden = true;
  $('sign-out').hidden = true;
  $('sign-in').hidden = false;
  $('node').textContent = '';
  $('sign-in-error').textContent = message;
  $('admin-key').focus();
}

async function enter(stats) {
  $('sign-in').hidden = true;
  $('app').hidden = false;
  $('sign-out').hidden = false;
  takeStats(stats);
  await loadTenants();
  show(state.view);
  clearInterval(state.poll);
  state.poll = setInterval(poll, POLL_MS);
}

// ---------------------------------------------------------------- views

function show(view) {
  state.view = view;
  for (const tab of document.querySelectorAll('.tab')) {
    tab.setAttribute('aria-pressed', String(tab.dataset.view === view));
  }
  for (const section of document.querySelectorAll('.view')) {
    section.hidden = section.id !== `view-${view}`;
  }
  if (view === 'audit' && !state.streams.has('audit')) startAudit();
  if (view === 'live') renderLive();
}

async function poll() {
  if (state.polling || !state.key) return;
  state.polling = true;
  try {
    const { data } = await api('GET', '/admin/v1/stats');
    takeStats(data);
    if (state.selected) {
      const { data: one } = await api('GET', `/admin/v1/tenants/${state.selected.tenant.id}/stats`);
      renderTenantFigures(one);
    }
    if (state.view === 'live') renderLive();
  } catch (err) {
    if (state.key) setStatus(`Live figures not refreshed: ${describe(err)}`);
  } finally {
    state.polling = false;
  }
}

function takeStats(stats) {
  state.stats = stats;
  $('node').textContent = `node ${stats.nodeId}`;
  const known = new Set();
  for (const t of stats.tenants) {
    known.add(t.id);
    const hist = state.history.get(t.id) ?? { conn: [], cps: [] };
    hist.conn.push(t.connections);
    hist.cps.push(t.callsPerSecond);
    if (hist.conn.length > HISTORY) hist.conn.shift();
    if (hist.cps.length > HISTORY) hist.cps.shift();
    state.history.set(t.id, hist);
    const cell = document.querySelector(`[data-connections="${CSS.escape(t.id)}"]`);
    if (cell) cell.textContent = String(t.connections);
  }
  for (const id of state.history.keys()) if (!known.has(id)) state.history.delete(id);
}

// ---------------------------------------------------------------- tenants

async function loadTenants() {
  const all = [];
  let cursor = null;
  do {
    const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
    const { data } = await api('GET', `/admin/v1/tenants?limit=1000${q}`);
    all.push(...data.tenants);
    cursor = data.next;
  } while (cursor);
  state.tenants = all;
  renderTenantTable();
  for (const id of ['events-tenant', 'dead-tenant']) {
    const select = $(id);
    const was = select.value;
    select.replaceChildren(...all.map((t) => h('option', { value: t.id }, t.id)));
    if (all.some((t) => t.id === was)) select.value = was;
  }
}

function renderTenantTable() {
  const byId = new Map((state.stats?.tenants ?? []).map((t) => [t.id, t]));
  $('tenant-table').tBodies[0].replaceChildren(
    ...state.tenants.map((t) =>
      h(
        'tr',
        { class: state.selected?.tenant.id === t.id ? 'selected' : undefined },
        h('td', {}, h('code', {}, t.id)),
        h('td', {}, t.source),
        h('td', { class: 'num', 'data-connections': t.id }, String(byId.get(t.id)?.connections ?? 0)),
        h('td', {}, h('button', { type: 'button', 'aria-label': `Open ${t.id}`, onclick: () => openTenant(t.id) }, 'Open')),
      ),
    ),
  );
}

async function openTenant(id) {
  try {
    const { data, etag } = await api('GET', `/admin/v1/tenants/${encodeURIComponent(id)}`);
    state.selected = { tenant: data, etag };
    renderTenantTable();
    renderDetail();
    const { data: figures } = await api('GET', `/admin/v1/tenants/${encodeURIComponent(id)}/stats`);
    renderTenantFigures(figures);
    $('detail-title')?.focus();
  } catch (err) {
    setStatus(`Tenant ${id} not opened: ${describe(err)}`);
  }
}

/** Runs an admin change, then says so and reopens the tenant (its new version and lists). */
async function change(what, fn) {
  const id = state.selected.tenant.id;
  try {
    const result = await fn();
    setStatus(`${what}: done.`);
    await openTenant(id);
    return result;
  } catch (err) {
    if (err instanceof ApiError && err.status === 412) {
      setStatus(`${what}: the tenant changed since it was opened (412); it is reloaded, check and try again.`);
      await openTenant(id);
    } else {
      setStatus(`${what} failed: ${describe(err)}`);
    }
    return null;
  }
}

function renderTenantFigures(s) {
  const box = $('detail-figures');
  if (!box || s.tenant !== state.selected?.tenant.id) return;
  box.replaceChildren(
    h(
      'div',
      { class: 'figures' },
      figure('Connections', s.cluster.connections, 'cluster-wide', 'tenant-connections'),
      figure('Conversations', s.node.conversations, `node ${s.nodeId}`),
      figure('Calls/s', fmtRate(s.node.callsPerSecond), `node ${s.nodeId}, last 10 s`),
      figure('Webhook backlog', s.cluster.webhookBacklog ?? '–', 'conversations retrying'),
    ),
    h('h4', {}, 'Outcomes (this node)'),
    countsList(s.node.calls, 'No call finished on this node yet.'),
    h('h4', {}, 'Refusals by code (this node)'),
    countsList(s.node.refusals, 'Nothing refused on this node.'),
  );
}

function figure(label, value, note, id) {
  return h(
    'div',
    { class: 'figure' },
    h('div', { class: 'value', id }, String(value)),
    h('div', { class: 'label' }, label),
    h('div', { class: 'label' }, note),
  );
}

const LIMITS = [
  ['maxConnections', 'Max connections'],
  ['maxPagesPerConversation', 'Max pages a conversation'],
  ['pageMessagesPerSecond', 'Page messages a second'],
  ['callsPerSecond', 'Calls a second'],
  ['maxMessageBytes', 'Max message bytes'],
  ['defaultCallTimeoutMs', 'Default call timeout (ms)'],
  ['maxCallTimeoutMs', 'Max call timeout (ms)'],
];

function renderDetail() {
  const t = state.selected.tenant;
  const editable = t.source === 'admin';
  const detail = $('tenant-detail');
  const parts = [
    h('h3', { id: 'detail-title', tabindex: '-1' }, `Tenant ${t.id}`),
    h('p', { class: 'hint' }, editable ? `Created ${t.createdAt}` : 'From the config file: read-only here.'),
    h('div', { id: 'detail-figures' }),
  ];
  if (editable) parts.push(settingsForm(t));
  parts.push(apiKeys(t, editable), tokenKeys(t, editable));
  if (editable) parts.push(webhookSecrets(t), deleteZone(t));
  detail.replaceChildren(...parts);
}

function settingsForm(t) {
  const origins = h('textarea', { id: 'edit-origins', rows: '3' });
  origins.value = t.allowedOrigins.join('\n');
  const inputs = LIMITS.map(([k, label]) => {
    const input = h('input', { id: `limit-${k}`, type: 'number', min: '1', value: t.limits[k] });
    return [k, input, h('div', {}, h('label', { for: `limit-${k}` }, label), input)];
  });
  const save = async (event) => {
    event.preventDefault();
    const limits = {};
    for (const [k, input] of inputs) limits[k] = Number(input.value);
    const allowedOrigins = origins.value.split('\n').map((s) => s.trim()).filter(Boolean);
    await change('Settings saved', () =>
      api('PATCH', `/admin/v1/tenants/${t.id}`, { allowedOrigins, limits }, { 'If-Match': state.selected.etag }),
    );
  };
  return h(
    'form',
    { class: 'card', id: 'settings-form', onsubmit: save, novalidate: true },
    h('h4', {}, 'Origins and limits'),
    h('label', { for: 'edit-origins' }, 'Allowed origins (one a line)'),
    origins,
    h('div', { class: 'limits' }, inputs.map(([, , box]) => box)),
    h('p', { class: 'hint' }, `Saved only if nobody changed the tenant since it was opened (version ${state.selected.etag}).`),
    h('button', { type: 'submit' }, 'Save settings'),
  );
}

function apiKeys(t, editable) {
  const items = t.apiKeys.map((k) => {
    const policy = h('textarea', { id: `policy-${k.apiKeyId}`, rows: '2', spellcheck: 'false' });
    policy.value = JSON.stringify(k.policy ?? {});
    const setPolicy = async () => {
      let parsed;
      try {
        parsed = JSON.parse(policy.value || '{}');
      } catch (err) {
        setStatus(`The policy of ${k.apiKeyId} is not JSON: ${err.message}`);
        policy.focus();
        return;
      }
      await change(`Policy of ${k.apiKeyId} set`, () =>
        api('PATCH', `/admin/v1/tenants/${t.id}/api-keys/${k.apiKeyId}`, { policy: parsed }),
      );
    };
    return h(
      'li',
      {},
      h('div', { class: 'row' }, h('code', {}, k.apiKeyId), k.expiresAt ? h('span', { class: 'hint' }, `expires ${k.expiresAt}`) : null),
      editable
        ? [
            h('label', { for: `policy-${k.apiKeyId}` }, `Policy of ${k.apiKeyId} (JSON; {} allows everything)`),
            policy,
            h(
              'div',
              { class: 'row' },
              h('button', { type: 'button', onclick: setPolicy }, `Set policy of ${k.apiKeyId}`),
              h('button', { type: 'button', class: 'danger', onclick: () => change(`API key ${k.apiKeyId} deleted`, () => api('DELETE', `/admin/v1/tenants/${t.id}/api-keys/${k.apiKeyId}`)) }, `Delete ${k.apiKeyId}`),
            ),
          ]
        : h('code', {}, JSON.stringify(k.policy ?? {})),
    );
  });
  const add = async () => {
    const r = await change('API key added', () => api('POST', `/admin/v1/tenants/${t.id}/api-keys`, {}));
    if (r) showSecrets({ apiKeyId: r.data.apiKeyId, apiKey: r.data.apiKey });
  };
  return h(
    'section',
    { 'aria-label': 'API keys' },
    h('h4', {}, 'API keys'),
    h('ul', { class: 'keys' }, items),
    editable ? h('p', {}, h('button', { type: 'button', onclick: add }, 'Add API key')) : null,
  );
}

function tokenKeys(t, editable) {
  const add = async () => {
    const r = await change('Token key added', () => api('POST', `/admin/v1/tenants/${t.id}/token-keys`, {}));
    if (r) showSecrets({ tokenKid: r.data.kid, tokenSecret: r.data.tokenSecret });
  };
  return h(
    'section',
    { 'aria-label': 'Token keys' },
    h('h4', {}, 'Token keys'),
    h(
      'ul',
      { class: 'keys' },
      t.tokenKeys.map((k) =>
        h(
          'li',
          { class: 'row' },
          h('code', {}, k.kid),
          h('span', { class: 'hint' }, k.kind),
          editable
            ? h('button', { type: 'button', class: 'danger', onclick: () => change(`Token key ${k.kid} deleted`, () => api('DELETE', `/admin/v1/tenants/${t.id}/token-keys/${k.kid}`)) }, `Delete ${k.kid}`)
            : null,
        ),
      ),
    ),
    editable ? h('p', {}, h('button', { type: 'button', onclick: add }, 'Add token key')) : null,
  );
}

function webhookSecrets(t) {
  const add = async () => {
    const r = await change('Webhook secret added', () => api('POST', `/admin/v1/tenants/${t.id}/webhook-secrets`));
    if (r) showSecrets({ webhookSecretId: r.data.webhookSecretId, webhookSecret: r.data.webhookSecret });
  };
  return h(
    'section',
    { 'aria-label': 'Webhook secrets' },
    h('h4', {}, 'Webhook secrets'),
    h('p', { class: 'hint' }, t.webhookUrl ? `Webhooks go to ${t.webhookUrl}` : 'No webhook URL.'),
    h(
      'ul',
      { class: 'keys' },
      (t.webhookSecrets ?? []).map((s) =>
        h(
          'li',
          { class: 'row' },
          h('code', {}, s.webhookSecretId),
          h('button', { type: 'button', class: 'danger', onclick: () => change(`Webhook secret ${s.webhookSecretId} deleted`, () => api('DELETE', `/admin/v1/tenants/${t.id}/webhook-secrets/${s.webhookSecretId}`)) }, `Delete ${s.webhookSecretId}`),
        ),
      ),
    ),
    h('p', {}, h('button', { type: 'button', onclick: add }, 'Add webhook secret')),
  );
}

function deleteZone(t) {
  const confirm = h('input', { id: 'confirm-delete', autocomplete: 'off', spellcheck: 'false' });
  const button = h('button', { type: 'button', class: 'danger', disabled: true }, `Delete tenant ${t.id}`);
  confirm.addEventListener('input', () => {
    button.disabled = confirm.value !== t.id;
  });
  button.addEventListener('click', async () => {
    if (confirm.value !== t.id) return;
    try {
      await api('DELETE', `/admin/v1/tenants/${t.id}`, undefined, { 'If-Match': state.selected.etag });
      state.selected = null;
      $('tenant-detail').replaceChildren();
      setStatus(`Tenant ${t.id} deleted: its pages are closed and its keys refused on every node.`);
      await loadTenants();
    } catch (err) {
      setStatus(`Tenant ${t.id} not deleted: ${describe(err)}`);
    }
  });
  return h(
    'section',
    { class: 'danger-zone', 'aria-label': 'Delete the tenant' },
    h('h4', {}, 'Delete the tenant'),
    h('p', { class: 'hint' }, 'Its pages are closed, its keys refused, its events, queues and dead letters dropped.'),
    h('label', { for: 'confirm-delete' }, `Type ${t.id} to confirm`),
    confirm,
    h('p', {}, button),
  );
}

async function createTenant(event) {
  event.preventDefault();
  const error = $('create-error');
  error.textContent = '';
  const id = $('new-id').value.trim();
  const body = {
    id,
    allowedOrigins: $('new-origins').value.split('\n').map((s) => s.trim()).filter(Boolean),
    pusher: $('new-pusher').checked,
  };
  const webhook = $('new-webhook').value.trim();
  if (webhook) body.webhookUrl = webhook;
  if ($('new-private').checked) body.webhookAllowPrivate = true;
  try {
    const { data } = await api('POST', '/admin/v1/tenants', body);
    $('create-form').reset();
    await loadTenants();
    await openTenant(id);
    showSecrets(data.secrets);
    setStatus(`Tenant ${id} created.`);
  } catch (err) {
    error.textContent = `Not created: ${describe(err)}`;
  }
}

const SECRET_LABELS = {
  apiKeyId: 'API key id',
  apiKey: 'API key',
  tokenKid: 'Token key id',
  tokenSecret: 'Token secret',
  pusherKey: 'Pusher key',
  pusherSecret: 'Pusher secret',
  webhookSecretId: 'Webhook secret id',
  webhookSecret: 'Webhook secret',
};

/** Shows secrets once, each with a copy button; they are dropped from the page when done. */
function showSecrets(secrets) {
  const rows = [];
  for (const [k, v] of Object.entries(secrets)) {
    if (v === null || v === undefined) continue;
    const label = SECRET_LABELS[k] ?? k;
    const value = h('input', { id: `secret-${k}`, readonly: true, class: 'mono', 'aria-label': label });
    value.value = v;
    const copy = h('button', { type: 'button', 'aria-label': `Copy ${label}` }, 'Copy');
    copy.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(v);
        copy.textContent = 'Copied';
      } catch {
        value.select();
        copy.textContent = document.execCommand('copy') ? 'Copied' : 'Selected: copy it';
      }
    });
    rows.push(h('dt', {}, label), h('dd', {}, value), h('dd', {}, copy));
  }
  $('secret-list').replaceChildren(...rows);
  $('secrets').hidden = false;
  $('secrets').focus();
}

// ---------------------------------------------------------------- live, audit, events, dead letters

function renderLive() {
  const s = state.stats;
  if (!s) return;
  $('live-totals').replaceChildren(
    figure('Tenants', s.cluster.tenants, 'cluster'),
    figure('Connections', s.cluster.connections, 'cluster-wide', 'total-connections'),
    figure('Conversations', s.node.conversations, `node ${s.nodeId}`),
    figure('Calls/s', fmtRate(s.node.callsPerSecond), `node ${s.nodeId}`),
  );
  $('live-table').tBodies[0].replaceChildren(
    ...s.tenants.map((t) => {
      const hist = state.history.get(t.id) ?? { conn: [], cps: [] };
      return h(
        'tr',
        {},
        h('td', {}, h('code', {}, t.id)),
        h('td', { class: 'num', 'data-live-connections': t.id }, String(t.connections)),
        h('td', {}, sparkline(hist.conn, `connections of ${t.id}, last two minutes`)),
        h('td', { class: 'num' }, String(t.conversations)),
        h('td', { class: 'num' }, fmtRate(t.callsPerSecond)),
        h('td', {}, sparkline(hist.cps, `calls a second of ${t.id}, last two minutes`)),
      );
    }),
  );
}

function prepend(list, item) {
  list.prepend(item);
  while (list.children.length > LOG_MAX) list.lastElementChild.remove();
}

function startAudit() {
  const list = $('audit-log');
  follow(
    'audit',
    '/admin/v1/events',
    (ev) => {
      let entry = {};
      try {
        entry = JSON.parse(ev.data);
      } catch {
        entry = { detail: ev.data };
      }
      prepend(
        list,
        h(
          'li',
          {},
          h('span', { class: 'at' }, entry.at ?? ''),
          h('span', { class: 'type' }, ev.event),
          h('code', {}, entry.tenant ?? ''),
          ' ',
          h('span', { class: 'hint' }, `by ${entry.adminKeyId ?? '?'} `),
          h('code', {}, JSON.stringify(entry.detail ?? {})),
        ),
      );
    },
    (err) => setStatus(`Audit log: ${describe(err)}`),
  );
}

function followTenantEvents(event) {
  event.preventDefault();
  const id = $('events-tenant').value;
  if (!id) return;
  const list = $('event-log');
  list.replaceChildren();
  setStatus(`Following the events of ${id}.`);
  follow(
    'events',
    `/admin/v1/tenants/${encodeURIComponent(id)}/events`,
    (ev) => {
      let body = ev.data;
      try {
        body = JSON.stringify(JSON.parse(ev.data).data ?? {});
      } catch {
        /* shown as sent */
      }
      prepend(
        list,
        h('li', {}, h('span', { class: 'type' }, ev.event), h('span', { class: 'at' }, ev.id), h('code', {}, body.length > 400 ? `${body.slice(0, 400)}…` : body)),
      );
    },
    (err) => setStatus(`Events of ${id}: ${describe(err)}`),
  );
}

async function showDeadLetters(event) {
  event?.preventDefault();
  const id = $('dead-tenant').value;
  if (!id) return;
  try {
    const { data } = await api('GET', `/admin/v1/tenants/${encodeURIComponent(id)}/webhooks/failed`);
    const body = $('dead-table').tBodies[0];
    if (data.failed.length === 0) {
      body.replaceChildren(h('tr', {}, h('td', { colspan: '6' }, `No dead letter for ${id}.`)));
      return;
    }
    body.replaceChildren(
      ...data.failed.map((d) =>
        h(
          'tr',
          {},
          h('td', {}, h('code', {}, `${d.event?.type ?? ''} ${d.eventId}`)),
          h('td', {}, h('code', {}, d.conversation)),
          h('td', { class: 'num' }, String(d.attempts)),
          h('td', {}, d.lastError),
          h('td', {}, d.firstFailureMs ? new Date(d.firstFailureMs).toISOString() : ''),
          h('td', {}, h('button', { type: 'button', onclick: () => retry(id, d.id) }, `Retry ${d.eventId}`)),
        ),
      ),
    );
  } catch (err) {
    setStatus(`Dead letters of ${id}: ${describe(err)}`);
  }
}

async function retry(tenant, dl) {
  try {
    await api('POST', `/admin/v1/tenants/${encodeURIComponent(tenant)}/webhooks/failed/${encodeURIComponent(dl)}/retry`);
    setStatus(`Dead letter ${dl} is back in its conversation's queue.`);
  } catch (err) {
    setStatus(`Dead letter ${dl} not retried: ${describe(err)}`);
  }
  await showDeadLetters();
}

// ---------------------------------------------------------------- start

$('sign-in-form').addEventListener('submit', signIn);
$('sign-out').addEventListener('click', () => signOut('Signed out.'));
$('create-form').addEventListener('submit', createTenant);
$('events-form').addEventListener('submit', followTenantEvents);
$('dead-form').addEventListener('submit', showDeadLetters);
$('secrets-done').addEventListener('click', () => {
  $('secret-list').replaceChildren();
  $('secrets').hidden = true;
  $('detail-title')?.focus();
});
for (const tab of document.querySelectorAll('.tab')) {
  tab.addEventListener('click', () => show(tab.dataset.view));
}

if (state.key) {
  api('GET', '/admin/v1/stats')
    .then(({ data }) => enter(data))
    .catch((err) => {
      if (!(err instanceof ApiError && err.status === 401)) signOut(`Could not sign in: ${describe(err)}`);
    });
} else {
  $('admin-key').focus();
}
