// agent.js: the demo "agent console". Plays the agent backend against the gateway's agent API
// with the dev API key: shows the conversation's latest manifest, calls and describes page
// tools, and follows the event stream (Server-Sent Events read with fetch, because EventSource
// cannot send an Authorization header), resuming with Last-Event-ID after a drop.

const $ = (id) => document.getElementById(id);
const MAX_EVENTS = 200;

let session; // {tenant, user, conversation, apiKey, apiBase, …} from /demo/session

// ---------------------------------------------------------------- HTTP

/** An agent API error, with the problem+json body (RFC 9457) when there is one. */
class ApiError extends Error {
  constructor(status, problem, retryAfter) {
    const p = problem && typeof problem === 'object' ? problem : {};
    const head = [status, p.code, p.title].filter(Boolean).join(' · ');
    const detail = p.detail ?? (typeof problem === 'string' && problem ? problem.slice(0, 300) : '');
    super(`${head}${detail ? `: ${detail}` : ''}${retryAfter ? ` (retry after ${retryAfter} s)` : ''}`);
    this.status = status;
    this.problem = p;
  }
}

async function readBody(res) {
  const type = res.headers.get('content-type') ?? '';
  if (type.includes('json')) return res.json().catch(() => null);
  return res.text().catch(() => '');
}

function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${session.apiKey}`, ...extra };
}

/** Calls the agent API under apiBase; resolves with the JSON body or throws ApiError. */
async function api(path, { method = 'GET', body } = {}) {
  const headers = authHeaders({ Accept: 'application/json' });
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`${session.apiBase}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
  });
  const data = await readBody(res);
  if (!res.ok) throw new ApiError(res.status, data, res.headers.get('retry-after'));
  return data;
}

const conversationPath = () =>
  `/users/${encodeURIComponent(session.user)}/conversations/${encodeURIComponent(session.conversation)}`;

async function fetchSession() {
  const query = new URLSearchParams();
  const own = new URLSearchParams(location.search);
  for (const key of ['user', 'conversation']) if (own.get(key)) query.set(key, own.get(key));
  const res = await fetch(`/demo/session${query.toString() ? `?${query}` : ''}`, { cache: 'no-store' });
  if (!res.ok) throw new ApiError(res.status, await readBody(res));
  return res.json();
}

// ---------------------------------------------------------------- conversation state

const hintNames = (hints) => Object.keys(hints ?? {}).filter((k) => hints[k] === true);

function cell(text, className) {
  return Object.assign(document.createElement('td'), { textContent: text, className: className ?? '' });
}

function renderState(state) {
  $('state-client').textContent = state.clientId ?? 'no page yet';
  $('state-rev').textContent = state.rev ?? '–';
  const pages = state.pages;
  $('state-pages').textContent = Array.isArray(pages) ? String(pages.length) : String(pages ?? '–');
  $('state-pages').title = JSON.stringify(pages ?? null);
  const tools = Array.isArray(state.tools) ? state.tools : [];
  $('tool-names').replaceChildren(...tools.map((t) => Object.assign(document.createElement('option'), { value: t.name })));
  const rows = tools.map((tool) => {
    const row = document.createElement('tr');
    const name = cell('', 'name');
    const pick = Object.assign(document.createElement('button'), { type: 'button', className: 'link', textContent: tool.name });
    pick.title = 'Use this tool in the call form';
    pick.addEventListener('click', () => {
      $('call-tool').value = tool.name;
      $('call-input').focus();
    });
    name.append(pick);
    const hints = cell('', 'hints');
    const names = hintNames(tool.hints);
    hints.append(...(names.length ? names : ['none']).map((h) =>
      Object.assign(document.createElement('span'), { className: `hint hint-${h}`, textContent: h })));
    row.append(name, cell(tool.llmName ?? ''), hints, cell(tool.description ?? ''));
    return row;
  });
  if (rows.length === 0) {
    const row = document.createElement('tr');
    const empty = cell('No page tools yet: open the app page for this conversation.', 'empty');
    empty.colSpan = 4;
    row.append(empty);
    rows.push(row);
  }
  $('tools').tBodies[0].replaceChildren(...rows);
}

async function refreshState() {
  try {
    renderState(await api(conversationPath()));
    $('state-error').textContent = '';
  } catch (err) {
    $('state-error').textContent = err.message;
  }
}

// ---------------------------------------------------------------- calls

function showOutcome(label, value, status) {
  $('call-status').textContent = label;
  $('call-outcome').dataset.status = status;
  $('call-outcome').textContent = typeof value === 'string' ? value : JSON.stringify(value, null, 2);
}

async function send(kind) {
  const tool = $('call-tool').value.trim();
  if (!tool) return showOutcome('Enter a tool name.', '', 'error');
  const body = { tool };
  if (kind === 'calls') {
    try {
      body.input = JSON.parse($('call-input').value || '{}');
    } catch (err) {
      return showOutcome('The input is not JSON.', err.message, 'error');
    }
    if (body.input === null || typeof body.input !== 'object' || Array.isArray(body.input)) {
      return showOutcome('The input must be a JSON object ({} for none).', '', 'error');
    }
  }
  const timeout = Number.parseInt($('call-timeout').value, 10);
  if (Number.isFinite(timeout) && timeout > 0) body.timeoutMs = timeout;

  for (const button of [$('call-send'), $('describe-send')]) button.disabled = true;
  showOutcome(`${kind === 'calls' ? 'Calling' : 'Describing'} ${tool}: waiting for the page…`, '', 'waiting');
  try {
    const answer = await api(`${conversationPath()}/${kind}`, { method: 'POST', body });
    const status = answer?.outcome?.status ?? 'unknown';
    showOutcome(`${tool}: ${status} · call ${answer.id} · page ${answer.clientId}`, answer, status);
  } catch (err) {
    showOutcome(err.message, err.problem && Object.keys(err.problem).length ? err.problem : '', 'error');
  } finally {
    for (const button of [$('call-send'), $('describe-send')]) button.disabled = false;
  }
}

async function loadLlmTools() {
  try {
    const answer = await api(`${conversationPath()}/llm-tools?format=${encodeURIComponent($('llm-format').value)}`);
    $('llm-tools').textContent = JSON.stringify(answer, null, 2);
  } catch (err) {
    $('llm-tools').textContent = err.message;
  }
}

// ---------------------------------------------------------------- events (SSE over fetch)

/**
 * An incremental text/event-stream parser. push(text) takes decoded chunks; onEvent gets
 * {id, type, data} for each dispatched event. lastEventId survives across events (and is
 * seeded by the caller on reconnect), as in the HTML spec; retry holds the server's "retry:".
 */
function sseParser(onEvent, lastEventId = '') {
  let pending = ''; // text after the last complete line
  let data = [];
  let type = '';
  const state = { lastEventId, retry: undefined };

  function line(text) {
    if (text === '') {
      if (data.length > 0) onEvent({ id: state.lastEventId, type: type || 'message', data: data.join('\n') });
      data = [];
      type = '';
      return;
    }
    if (text.startsWith(':')) return; // comment or keep-alive
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') type = value;
    else if (field === 'id' && !value.includes('\0')) state.lastEventId = value;
    else if (field === 'retry' && /^\d+$/.test(value)) state.retry = Number(value);
  }

  state.push = (text) => {
    pending += text;
    const breaks = /\r\n|\r|\n/g;
    let start = 0;
    for (let m = breaks.exec(pending); m; m = breaks.exec(pending)) {
      if (m[0] === '\r' && m.index === pending.length - 1) break; // may be half of a CRLF split across chunks
      line(pending.slice(start, m.index));
      start = breaks.lastIndex;
    }
    pending = pending.slice(start);
  };
  return state;
}

let lastEventId = '';
const seenEvents = new Set(); // event ids shown, so a resumed stream never shows one twice

function showStreamStatus(text, state) {
  $('stream-status').textContent = text;
  $('stream-status').dataset.state = state;
}

function renderEvent({ id, type, data }) {
  if (id && seenEvents.has(id)) return;
  if (id) seenEvents.add(id);
  let body;
  try {
    body = JSON.parse(data);
  } catch {
    body = data;
  }
  const item = document.createElement('li');
  item.dataset.type = type;
  const head = document.createElement('div');
  head.className = 'event-head';
  head.append(
    Object.assign(document.createElement('strong'), { textContent: type }),
    Object.assign(document.createElement('time'), { textContent: body?.timestamp ?? new Date().toISOString() }),
    Object.assign(document.createElement('code'), { textContent: id }),
  );
  const pre = Object.assign(document.createElement('pre'), {
    textContent: JSON.stringify(body?.data ?? body, null, 2),
  });
  item.append(head, pre);
  const list = $('events');
  list.prepend(item);
  while (list.children.length > MAX_EVENTS) list.lastElementChild.remove();

  if (type === 'page.manifest' || type === 'page.disconnected') refreshState();
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Reads the event stream for ever, reconnecting with backoff and Last-Event-ID. */
async function followEvents() {
  let delayMs = 1000;
  for (;;) {
    let retryMs;
    try {
      showStreamStatus('connecting…', 'connecting');
      const headers = authHeaders({ Accept: 'text/event-stream' });
      if (lastEventId) headers['Last-Event-ID'] = lastEventId;
      const query = new URLSearchParams({ user: session.user, conversation: session.conversation });
      const res = await fetch(`${session.apiBase}/events?${query}`, { headers, cache: 'no-store' });
      if (!res.ok) {
        const err = new ApiError(res.status, await readBody(res), res.headers.get('retry-after'));
        if (res.status === 401 || res.status === 403 || res.status === 404) {
          return showStreamStatus(`stopped: ${err.message}`, 'closed');
        }
        throw err;
      }
      showStreamStatus('live', 'live');
      delayMs = 1000;
      const parser = sseParser((event) => {
        if (event.id) lastEventId = event.id;
        renderEvent(event);
      }, lastEventId);
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(value);
      }
      lastEventId = parser.lastEventId;
      retryMs = parser.retry;
      showStreamStatus('dropped', 'reconnecting');
    } catch (err) {
      showStreamStatus(`error: ${err.message}`, 'reconnecting');
    }
    const wait = retryMs ?? delayMs;
    showStreamStatus(`${$('stream-status').textContent}; reconnecting in ${(wait / 1000).toFixed(1)} s`, 'reconnecting');
    await sleep(wait);
    delayMs = Math.min(delayMs * 2, 30000);
  }
}

// ---------------------------------------------------------------- hosted MCP

/** Mints an MCP token for this conversation and shows the endpoint with a connector config. */
async function mintMcp() {
  $('mcp-error').textContent = '';
  try {
    const minted = await api('/tokens', {
      method: 'POST',
      body: { user: session.user, conversation: session.conversation, scope: 'mcp' },
    });
    $('mcp-url').textContent = minted.url;
    $('mcp-expires').textContent = minted.expiresAt;
    const config = {
      mcpServers: {
        'toolmark-demo': { type: 'http', url: minted.url, headers: { Authorization: `Bearer ${minted.token}` } },
      },
    };
    $('mcp-config').textContent = JSON.stringify(config, null, 2);
  } catch (err) {
    $('mcp-error').textContent = `Not minted: ${err.message}`;
  }
}

// ---------------------------------------------------------------- start

async function start() {
  try {
    session = await fetchSession();
  } catch (err) {
    $('state-error').textContent = `No session: ${err.message}`;
    return;
  }
  $('session-user').textContent = session.user;
  $('session-conversation').textContent = session.conversation;
  $('session-tenant').textContent = session.tenant;
  const query = new URLSearchParams({ user: session.user, conversation: session.conversation });
  $('app-link').href = `/demo?${query}`;

  $('refresh').addEventListener('click', refreshState);
  $('call-form').addEventListener('submit', (event) => {
    event.preventDefault();
    send('calls');
  });
  $('describe-send').addEventListener('click', () => send('describe'));
  $('llm-load').addEventListener('click', loadLlmTools);
  $('mcp-mint').addEventListener('click', mintMcp);

  await refreshState();
  followEvents();
}

start();
