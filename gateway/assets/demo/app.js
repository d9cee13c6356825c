// app.js: the demo "app page". A to-do list and a sign-up form whose tools an agent calls through
// the gateway: registers the tools, attaches the bridge over the page WebSocket (or, with
// ?transport=echo, over the Echo transport of echo.js) and renders
// the connection, the pending confirmations and an activity log. The same tools can also be
// paired with a desktop MCP client ("Pair with desktop MCP", mcp-pairing.js; port from
// ?mcpPort=, default 17840). Agent input is hostile, so everything is rendered with
// textContent, never as HTML.

import { REDACTED, attachBridge, createRegistry, ok, websocketTransport } from './bridge.js';
import { DEFAULT_MCP_PORT, mcpPairing } from './mcp-pairing.js';
import { echoTransport } from './echo.js';
import { startWebMCP } from './webmcp-demo.js';

const $ = (id) => document.getElementById(id);
const SIGNUP_FIELDS = ['name', 'email', 'password'];
const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
const MAX_LOG_ENTRIES = 200;

// ---------------------------------------------------------------- session and socket

/** GET /demo/session, passing ?user= and ?conversation= through from this page's URL. */
async function fetchSession() {
  const query = new URLSearchParams();
  const own = new URLSearchParams(location.search);
  for (const key of ['user', 'conversation']) if (own.get(key)) query.set(key, own.get(key));
  const res = await fetch(`/demo/session${query.toString() ? `?${query}` : ''}`, { cache: 'no-store' });
  if (!res.ok) throw new Error(`GET /demo/session answered ${res.status}`);
  return res.json();
}

function socketUrl(session) {
  const url = new URL(session.pagePath, location.href);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  return url.href;
}

// ---------------------------------------------------------------- to-do list

const todos = []; // [{id, text}], in display order
let nextTodoId = 1;

function addTodo(text) {
  const item = { id: nextTodoId++, text };
  todos.push(item);
  renderTodos();
  return item;
}

function renderTodos() {
  $('todo-list').replaceChildren(
    ...todos.map((item) => Object.assign(document.createElement('li'), { textContent: item.text })),
  );
  $('todo-count').textContent = `${todos.length} item${todos.length === 1 ? '' : 's'}`;
}

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

// ---------------------------------------------------------------- sign-up form

const field = (name) => $(`signup-${name}`);
const formValues = () => Object.fromEntries(SIGNUP_FIELDS.map((name) => [name, field(name).value]));

/** How a value is reported to the agent: absent when empty, "[redacted]" for the password. */
const reported = (name, value) => (value === '' ? undefined : name === 'password' ? REDACTED : value);

function formIssues() {
  const values = formValues();
  const issues = [];
  if (values.name.trim() === '') issues.push({ path: 'name', message: 'Required' });
  if (!EMAIL.test(values.email)) issues.push({ path: 'email', message: 'Invalid email' });
  if (values.password.length < 8) issues.push({ path: 'password', message: 'At least 8 characters' });
  return issues;
}

function setSignupResult(text, state) {
  const result = $('signup-result');
  result.textContent = text;
  result.dataset.state = state;
}

function markSubmitted() {
  setSignupResult('Submitted', 'ok');
  return formValues().email;
}

// ---------------------------------------------------------------- tools

const noInput = { type: 'object', properties: {}, additionalProperties: false };

const tools = [
  {
    name: 'todo.add',
    title: 'Add a to-do',
    description: 'Add one item to the to-do list on the page. Returns the new item id, its text and the number of items.',
    hints: {},
    inputSchema: {
      type: 'object',
      properties: { text: { type: 'string', minLength: 1, maxLength: 200, description: 'The to-do text' } },
      required: ['text'],
      additionalProperties: false,
    },
    validate: ({ text }) => (text.trim() === '' ? [{ path: 'text', message: 'Must not be blank' }] : []),
    run({ text }) {
      const item = addTodo(text);
      return ok({ id: item.id, text: item.text, count: todos.length });
    },
  },
  {
    name: 'todo.list',
    title: 'List to-dos',
    description: 'List the items of the to-do list on the page, oldest first. The texts were typed by the user.',
    hints: { readOnly: true, untrustedContent: true },
    inputSchema: noInput,
    run: () => ok({ items: todos.map(({ id, text }) => ({ id, text })) }),
  },
  {
    name: 'todo.clear',
    title: 'Clear the to-do list',
    description: 'Delete every item of the to-do list. The user must confirm in the page; returns how many were deleted.',
    hints: { destructive: true },
    inputSchema: noInput,
    summarize: () => ({
      summary: `Delete all ${plural(todos.length, 'to-do item')}`,
      changes: todos.map((item) => ({ path: `items.${item.id}`, before: item.text })),
    }),
    run() {
      const cleared = todos.length;
      todos.length = 0;
      renderTodos();
      return ok({ cleared });
    },
  },
  {
    name: 'signup.fill',
    title: 'Fill the sign-up form',
    description:
      'Fill fields of the sign-up form (name, email, password); omitted fields are left as they are. ' +
      'Returns the field changes; the password is reported as "[redacted]". It does not submit.',
    hints: { untrustedContent: true },
    inputSchema: {
      type: 'object',
      properties: {
        name: { type: 'string', maxLength: 100, description: 'Full name' },
        email: { type: 'string', format: 'email', maxLength: 254, description: 'Email address' },
        password: { type: 'string', minLength: 8, maxLength: 128, description: 'Password, at least 8 characters' },
      },
      additionalProperties: false,
    },
    run(input) {
      const changes = [];
      for (const name of SIGNUP_FIELDS) {
        if (!Object.hasOwn(input, name)) continue;
        const before = field(name).value;
        field(name).value = input[name];
        changes.push({ path: name, before: reported(name, before), after: reported(name, input[name]) });
      }
      if (changes.length > 0) setSignupResult('', 'idle');
      return ok({ changes });
    },
  },
  {
    name: 'signup.submit',
    title: 'Submit the sign-up form',
    description:
      'Submit the sign-up form as currently filled. The user must confirm in the page; fill the form first ' +
      'with signup.fill. Returns invalid when a field is missing or wrong.',
    hints: { consequential: true },
    inputSchema: noInput,
    validate: () => formIssues(),
    summarize: () => ({
      summary: `Submit the sign-up form for ${formValues().email}`,
      changes: SIGNUP_FIELDS.map((name) => ({ path: name, after: reported(name, field(name).value) })),
    }),
    snapshot: () => formValues(), // approval after the form changed is refused stale
    run() {
      const issues = formIssues();
      if (issues.length > 0) return { status: 'invalid', issues };
      return ok({ submitted: true, email: markSubmitted() });
    },
  },
];

// ---------------------------------------------------------------- activity log and UI

function log(direction, text) {
  const entry = document.createElement('li');
  entry.dataset.direction = direction;
  const time = Object.assign(document.createElement('time'), { textContent: new Date().toLocaleTimeString() });
  entry.append(time, ` ${direction === 'in' ? '←' : direction === 'out' ? '→' : '!'} ${text}`);
  const list = $('log');
  list.prepend(entry);
  while (list.children.length > MAX_LOG_ENTRIES) list.lastElementChild.remove();
}

const shortId = (id) => String(id).slice(0, 8);
const brief = (value) => {
  const text = JSON.stringify(value, (key, v) => (key === 'password' ? REDACTED : v)) ?? '';
  return text.length > 160 ? `${text.slice(0, 157)}…` : text;
};

function logReceived(message) {
  if (message.type === 'call') log('in', `call ${message.tool} ${brief(message.input)} (id ${shortId(message.id)})`);
  else if (message.type === 'describe') log('in', `describe ${message.tool} (id ${shortId(message.id)})`);
  else log('in', `cancel (id ${shortId(message.id)})`);
}

function logSent(message) {
  if (message.type === 'manifest') log('out', `manifest rev ${message.rev}: ${plural(message.tools.length, 'tool')}`);
  else if (message.type === 'result') log('out', `result ${message.result.status} (id ${shortId(message.id)}) ${brief(message.result)}`);
  else if (message.type === 'confirmed') log('out', `confirmed ${message.result.status} (confirm ${shortId(message.confirmId)})`);
}

function showStatus(status) {
  const el = $('status');
  el.dataset.state = status.state;
  if (status.state === 'connected') el.textContent = 'connected';
  else if (status.state === 'connecting') el.textContent = 'connecting…';
  else if (status.state === 'reconnecting') {
    const why = status.code ? `close ${status.code}` : status.reason || 'network error';
    el.textContent = `reconnecting in ${(status.delayMs / 1000).toFixed(1)} s (${why})`;
  } else el.textContent = `closed (${status.code}${status.reason ? `: ${status.reason}` : ''})`;
}

function changeText({ path, before, after }) {
  const show = (v) => (v === undefined ? '(empty)' : typeof v === 'string' ? v : JSON.stringify(v));
  return `${path}: ${show(before)} → ${show(after)}`;
}

// Pending confirmations of every bridge (the gateway's, and the desktop MCP one when paired).
const pendingByBridge = new Map(); // bridge -> items

function setPending(bridge, items) {
  if (items.length === 0) pendingByBridge.delete(bridge);
  else pendingByBridge.set(bridge, items);
  renderPending();
}

function renderPending() {
  const panel = $('pending');
  const items = [...pendingByBridge].flatMap(([bridge, list]) => list.map((item) => ({ bridge, item })));
  if (items.length === 0) {
    panel.replaceChildren(Object.assign(document.createElement('p'), { className: 'empty', textContent: 'Nothing is waiting for you.' }));
    return;
  }
  panel.replaceChildren(...items.map(({ bridge, item }) => {
    const box = Object.assign(document.createElement('div'), { className: 'pending-item' });
    box.dataset.confirmId = item.confirmId;
    box.dataset.caller = item.caller ?? 'inapp';
    const summary = Object.assign(document.createElement('p'), { className: 'summary', textContent: item.summary });
    const changes = Object.assign(document.createElement('ul'), { className: 'changes' });
    changes.append(...item.changes.map((c) => Object.assign(document.createElement('li'), { textContent: changeText(c) })));
    const meta = Object.assign(document.createElement('p'), {
      className: 'meta',
      textContent: `${item.title}${item.caller === 'mcp' ? ' · desktop MCP' : ''} · expires ${new Date(item.expiresAt).toLocaleTimeString()}`,
    });
    const approve = Object.assign(document.createElement('button'), { type: 'button', className: 'approve', textContent: 'Approve' });
    const reject = Object.assign(document.createElement('button'), { type: 'button', className: 'reject', textContent: 'Reject' });
    approve.addEventListener('click', () => {
      approve.disabled = reject.disabled = true;
      bridge.approve(item.confirmId);
    });
    reject.addEventListener('click', () => {
      approve.disabled = reject.disabled = true;
      bridge.reject(item.confirmId);
    });
    const actions = Object.assign(document.createElement('div'), { className: 'actions' });
    actions.append(approve, reject);
    box.append(summary, changes, meta, actions);
    return box;
  }));
}

// ---------------------------------------------------------------- human controls

$('todo-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = $('todo-text');
  if (input.value.trim() !== '') addTodo(input.value.trim());
  input.value = '';
});

$('signup-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const issues = formIssues();
  if (issues.length === 0) markSubmitted();
  else setSignupResult(issues.map((i) => `${i.path}: ${i.message}`).join(' · '), 'error');
});

// ---------------------------------------------------------------- start

async function start() {
  renderTodos();
  let session;
  try {
    session = await fetchSession();
  } catch (err) {
    $('status').textContent = `no session (${err.message})`;
    $('status').dataset.state = 'closed';
    return;
  }
  $('session-user').textContent = session.user;
  $('session-conversation').textContent = session.conversation;
  const query = new URLSearchParams({ user: session.user, conversation: session.conversation });
  $('agent-link').href = `/demo/agent?${query}`;

  const transportName = new URLSearchParams(location.search).get('transport');
  if (transportName === 'webmcp') return startWebMCPDemo(session);

  const registry = createRegistry();
  for (const tool of tools) registry.register(tool);

  // ?transport=echo: Laravel Echo's way (Pusher channel in, POST to the app's bridge out).
  const useEcho = transportName === 'echo';
  $('status').dataset.transport = useEcho ? 'echo' : 'websocket';
  // The first attempt uses the session already fetched; reconnects fetch a fresh token.
  let fresh = session;
  const transport = useEcho
    ? echoTransport({
        wsUrl: socketUrl({ pagePath: session.pusherPath }),
        channel: session.channel,
        authUrl: '/demo/broadcasting/auth',
        postUrl: session.bridgePath,
        onSendError: (err) => log('error', `transport_failed: ${err.message}`),
      })
    : websocketTransport(async () => {
        const current = fresh ?? (await fetchSession());
        fresh = null;
        return socketUrl(current);
      });
  transport.onStatus(showStatus);

  const bridge = attachBridge(registry, transport);
  $('client-id').textContent = bridge.clientId;
  bridge.on('received', logReceived);
  bridge.on('sent', logSent);
  bridge.on('error', (e) => log('error', `${e.code}: ${e.message}`));
  bridge.on('pending', (items) => setPending(bridge, items));
  renderPending();
  addEventListener('pagehide', () => bridge.detach());
  startMcpPairing(registry);
  // A page restored from the back/forward cache has a detached bridge: start over as a new page load.
  addEventListener('pageshow', (event) => event.persisted && location.reload());
}

// ?transport=webmcp: the same tools through WebMCP and /v1/webmcp.js. The module reports no
// socket state, so the status names the transport; the agent console shows the manifest.
async function startWebMCPDemo(session) {
  const status = $('status');
  status.dataset.transport = 'webmcp';
  renderPending(); // WebMCP tools ask with confirm(): nothing waits here
  let fresh = session;
  const token = async () => {
    const current = fresh ?? (await fetchSession());
    fresh = null;
    return current.token;
  };
  try {
    const connection = await startWebMCP(tools, session.pagePath, token);
    $('client-id').textContent = connection.clientId;
    status.dataset.state = 'connected';
    status.textContent = 'WebMCP (/v1/webmcp.js)';
    log('out', `WebMCP: ${plural(tools.length, 'tool')} registered through the modelContext`);
    addEventListener('pagehide', () => connection.close());
    addEventListener('pageshow', (event) => event.persisted && location.reload());
  } catch (err) {
    status.dataset.state = 'closed';
    status.textContent = `WebMCP failed (${err.message})`;
  }
}

// ---------------------------------------------------------------- desktop MCP pairing

const MCP_LABELS = {
  connecting: 'connecting…',
  paired: 'paired',
  rejected: 'rejected (enter a new code)',
  superseded: 'superseded by another page',
  disconnected: 'disconnected, reconnecting…',
  unreachable: 'toolmark-mcp unreachable, retrying…',
};

function mcpPortFromUrl() {
  const raw = new URLSearchParams(location.search).get('mcpPort');
  const port = raw !== null && /^[0-9]{1,5}$/.test(raw) ? Number(raw) : NaN;
  return port >= 1 && port <= 65535 ? port : DEFAULT_MCP_PORT;
}

function startMcpPairing(registry) {
  const port = mcpPortFromUrl();
  $('mcp-port').textContent = String(port);
  let current = null; // the MCP bridge while paired
  const options = {
    registry,
    port,
    onStatus(status) {
      const el = $('mcp-status');
      el.dataset.state = status;
      el.textContent = MCP_LABELS[status] ?? status;
      log('mcp', `desktop MCP: ${status}`);
    },
    onBridge(bridge) {
      if (current) setPending(current, []);
      current = bridge;
      if (!bridge) return;
      $('mcp-status').dataset.clientId = bridge.clientId;
      bridge.on('received', (m) => logReceived(m));
      bridge.on('sent', logSent);
      bridge.on('error', (e) => log('error', `mcp ${e.code}: ${e.message}`));
      bridge.on('pending', (items) => setPending(bridge, items));
    },
  };
  let detach = mcpPairing(options); // resumes after a reload; inert without a stored token
  $('mcp-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const code = $('mcp-code').value.trim();
    if (code === '') return;
    detach();
    detach = mcpPairing({ ...options, code });
    $('mcp-code').value = '';
  });
  addEventListener('pagehide', () => detach());
}

start();
