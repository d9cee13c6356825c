// The operator's console: plain ES modules, no build step, no other origin. Everything it shows
// or does goes through the admin API of the gateway that served it (same origin), signed with
// the admin key the operator typed, kept in this tab's session storage only.

import { ApiError, api, describe, follow, stopStream } from './api.js';
import { $, HISTORY, figure, fmtRate, h, setStatus, sparkline } from './dom.js';
import { KEY_STORE, state } from './state.js';
import { createTenant, loadTenants, renderTenantFigures } from './tenants.js';

const POLL_MS = 2000;
const LOG_MAX = 300;

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
  if (view === 'live') {
    renderLive();
    poll();
  }
}

/** Reads the live figures; asked for while a read is running, it runs once more after it, so
 * that what an action changed is read after the action, not before it. */
async function poll() {
  if (!state.key) return;
  if (state.polling) {
    state.pollAgain = true;
    return;
  }
  state.polling = true;
  state.pollAgain = false;
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
  if (state.pollAgain) await poll();
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


// ---------------------------------------------------------------- live, audit, events, dead letters

function renderLive() {
  const s = state.stats;
  if (!s) return;
  $('live-totals').replaceChildren(
    figure('Tenants', s.cluster.tenants, 'cluster'),
    figure('Connections', s.cluster.connections, 'cluster-wide', 'total-connections'),
    figure('Conversations', s.node.conversations, `node ${s.nodeId}`),
    figure('Calls/s', fmtRate(s.cluster.callsPerSecond), 'cluster-wide'),
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

function auditItem(entry) {
  return h(
    'li',
    {},
    h('span', { class: 'at' }, entry.at ?? ''),
    h('span', { class: 'type' }, entry.kind ?? entry.type ?? ''),
    h('code', {}, entry.tenant ?? ''),
    ' ',
    h('span', { class: 'hint' }, `by ${entry.adminKeyId ?? '?'} `),
    h('code', {}, JSON.stringify(entry.detail ?? {})),
  );
}

/**
 * The audit log: the record first (GET /admin/v1/audit, a page at a time, the newest LOG_MAX
 * kept), of one tenant when the filter names one, then the live view from the last entry read
 * (GET /admin/v1/events after its id), so nothing is shown twice or missed in between.
 */
async function startAudit(event) {
  event?.preventDefault();
  stopStream('audit');
  const list = $('audit-log');
  const tenant = $('audit-tenant').value.trim();
  list.replaceChildren();
  const read = [];
  let cursor = '';
  let last = '';
  try {
    for (;;) {
      const q = new URLSearchParams({ limit: '1000' });
      if (tenant) q.set('tenant', tenant);
      if (cursor) q.set('cursor', cursor);
      const { data: page } = await api('GET', `/admin/v1/audit?${q}`);
      read.push(...page.entries);
      if (read.length > LOG_MAX) read.splice(0, read.length - LOG_MAX);
      if (page.entries.length) last = page.entries[page.entries.length - 1].id;
      if (!page.next) break;
      cursor = page.next;
      last = page.next;
    }
  } catch (err) {
    setStatus(`Audit log: ${describe(err)}`);
    return;
  }
  for (const entry of read) prepend(list, auditItem(entry));
  $('audit-count').textContent = tenant
    ? `${read.length} change(s) of ${tenant} kept, newest first; new ones appear live.`
    : `${read.length} change(s) kept, newest first; new ones appear live.`;
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
      if (tenant && entry.tenant !== tenant) return;
      prepend(list, auditItem({ ...entry, kind: ev.event }));
    },
    (err) => setStatus(`Audit log: ${describe(err)}`),
    last,
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
    poll();
  } catch (err) {
    setStatus(`Dead letter ${dl} not retried: ${describe(err)}`);
  }
  await showDeadLetters();
}

// ---------------------------------------------------------------- start

state.onUnauthorized = signOut;
state.refresh = poll;
$('sign-in-form').addEventListener('submit', signIn);
$('sign-out').addEventListener('click', () => signOut('Signed out.'));
$('create-form').addEventListener('submit', createTenant);
$('events-form').addEventListener('submit', followTenantEvents);
$('audit-form').addEventListener('submit', startAudit);
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
