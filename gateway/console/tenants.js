// The tenants view: the list, creation with the secrets shown once, and one tenant opened: its
// live figures, origins and limits (saved with If-Match), keys, policies, the tools its pages
// presented with their pins, and deletion.

import { ApiError, api, describe } from './api.js';
import { $, countsList, figure, fmtRate, h, setStatus } from './dom.js';
import { state } from './state.js';

export async function loadTenants() {
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

export function renderTenantTable() {
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

export async function openTenant(id) {
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
    state.refresh?.();
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

export function renderTenantFigures(s) {
  const box = $('detail-figures');
  if (!box || s.tenant !== state.selected?.tenant.id) return;
  box.replaceChildren(
    h(
      'div',
      { class: 'figures' },
      figure('Connections', s.cluster.connections, 'cluster-wide', 'tenant-connections'),
      figure('Conversations', s.node.conversations, `node ${s.nodeId}`),
      figure('Calls/s', fmtRate(s.cluster.callsPerSecond), `cluster-wide, ${s.cluster.nodes} node(s), last 10 s`),
      figure('Webhook backlog', s.cluster.webhookBacklog ?? '–', 'conversations retrying'),
    ),
    h('h4', {}, 'Outcomes (cluster-wide)'),
    countsList(s.cluster.calls, 'No call finished yet.'),
    h('h4', {}, 'Refusals by code (cluster-wide)'),
    countsList(s.cluster.refusals, 'Nothing refused.'),
    h('p', {}, `Requests that failed authentication (anyone can send them): ${s.cluster.unauthenticated ?? 0}`),
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
  parts.push(apiKeys(t, editable), tokenKeys(t, editable), toolsSection(t, editable));
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

/** A digest as the table shows it: its first 12 hex digits (the whole in its title). */
const shortDigest = (d) => d.replace(/^sha256:/, '').slice(0, 12);

/**
 * The tenant's tools: every definition its pages presented (cluster-wide, `tools/seen`), its
 * pins and their mode. Each definition can be pinned or unpinned, each action saying the change
 * it makes; the mode is set beside. Read when the tenant is opened.
 */
function toolsSection(t, editable) {
  const box = h(
    'section',
    { 'aria-label': 'Tools', id: 'detail-tools' },
    h('h4', {}, 'Tools'),
    h('p', { class: 'hint' }, 'Reading the tools its pages presented…'),
  );
  loadTools(t, editable, box);
  return box;
}

async function loadTools(t, editable, box) {
  const id = encodeURIComponent(t.id);
  let pins;
  let seen;
  try {
    [{ data: pins }, { data: seen }] = await Promise.all([
      api('GET', `/admin/v1/tenants/${id}/tools`),
      api('GET', `/admin/v1/tenants/${id}/tools/seen`),
    ]);
  } catch (err) {
    box.replaceChildren(h('h4', {}, 'Tools'), h('p', { class: 'error' }, `Tools not read: ${describe(err)}`));
    return;
  }
  if (state.selected?.tenant.id !== t.id) return;
  const key = (p) => `${p.name} ${p.digest}`;
  const pinned = new Set(pins.tools.map(key));
  const put = (what, mode, tools) => change(what, () => api('PUT', `/admin/v1/tenants/${id}/tools`, { mode, tools }));
  const enforced = pins.mode === 'enforce';
  const rows = seen.tools.map((s) => {
    const isPinned = pinned.has(key(s));
    const others = pins.tools.filter((p) => p.name === s.name && p.digest !== s.digest);
    let effect;
    if (isPinned) {
      effect = enforced
        ? `Unpinning hides this definition of ${s.name} from agents and refuses its calls.`
        : `Unpinning marks it "pinned": false (report) and hides it once the mode is enforce.`;
    } else {
      effect = `Pinning lets this definition of ${s.name} reach agents${enforced ? '' : ' under enforce'}`;
      effect += others.length
        ? `; ${s.name} keeps its other pinned definition (${others.map((o) => shortDigest(o.digest)).join(', ')}).`
        : '.';
    }
    const label = `${isPinned ? 'Unpin' : 'Pin'} ${s.name} ${shortDigest(s.digest)}`;
    const action = editable
      ? h(
          'button',
          {
            type: 'button',
            onclick: () =>
              isPinned
                ? put(`Unpinned ${s.name}`, pins.mode, pins.tools.filter((p) => key(p) !== key(s)))
                : put(`Pinned ${s.name}`, pins.mode, [...pins.tools, { name: s.name, digest: s.digest }]),
          },
          label,
        )
      : null;
    return h(
      'tr',
      { 'data-tool': s.name },
      h('td', {}, h('code', {}, s.name)),
      h('td', {}, h('code', { title: s.digest }, shortDigest(s.digest))),
      h('td', {}, isPinned ? 'pinned' : 'not pinned'),
      h('td', {}, s.lastSeen),
      h('td', {}, action, h('div', { class: 'hint' }, effect)),
    );
  });
  const unpresented = pins.tools.filter((p) => !seen.tools.some((s) => key(s) === key(p)));
  const notPinned = seen.tools.filter((s) => !pinned.has(key(s))).length;
  const mode = h('select', { id: 'pins-mode' }, ['off', 'report', 'enforce'].map((m) => h('option', { value: m }, m)));
  mode.value = pins.mode;
  const modeHint = h('p', { class: 'hint', id: 'pins-mode-effect' });
  const explain = () => {
    modeHint.textContent = {
      off: 'Off: every definition reaches agents; nothing is checked.',
      report: `Report: every definition reaches agents; ${notPinned} not pinned shown with "pinned": false, each announced once (tool.unpinned).`,
      enforce: `Enforce: only pinned definitions reach agents; ${notPinned} of the ${seen.tools.length} presented would be hidden and their calls refused (403 tool_not_pinned).`,
    }[mode.value];
  };
  mode.addEventListener('change', explain);
  explain();
  box.replaceChildren(
    h('h4', {}, 'Tools'),
    h('p', { class: 'hint' }, `Mode ${pins.mode}, ${pins.tools.length} pinned; ${seen.tools.length} definition(s) presented by its pages (kept 30 days).`),
    editable
      ? h(
          'div',
          { class: 'row' },
          h('label', { for: 'pins-mode' }, 'Pins mode'),
          mode,
          h('button', { type: 'button', onclick: () => put(`Pins mode ${mode.value}`, mode.value, pins.tools) }, 'Set pins mode'),
        )
      : null,
    editable ? modeHint : null,
    h(
      'table',
      { id: 'tools-table' },
      h('caption', {}, 'Tool definitions its pages presented, cluster-wide'),
      h(
        'thead',
        {},
        h('tr', {}, ['Tool', 'Digest', 'Pin', 'Last presented'].map((c) => h('th', { scope: 'col' }, c)), h('th', { scope: 'col' }, h('span', { class: 'sr' }, 'Actions'))),
      ),
      h('tbody', {}, rows),
    ),
    unpresented.length
      ? h(
          'p',
          { class: 'hint' },
          `Pinned but not presented lately: ${unpresented.map((p) => `${p.name} ${shortDigest(p.digest)}`).join(', ')}`,
        )
      : null,
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
      state.refresh?.();
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

export async function createTenant(event) {
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
    state.refresh?.();
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
export function showSecrets(secrets) {
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
