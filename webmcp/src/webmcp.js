// webmcp.js: puts the tools a page registers through WebMCP (document.modelContext) on Toolmark
// Gateway as a bridge protocol v1 page, so agents on the server can list and call them.
// Served by the gateway at GET /v1/webmcp.js; no dependencies. See webmcp/README.md.
//
//   import { connectWebMCP } from 'https://gateway.example/v1/webmcp.js';
//   const { clientId, close } = connectWebMCP({ url: 'wss://gateway.example/v1/tenants/acme/page', token });
//
// Everything that arrives from the gateway is treated as hostile: bounded, filtered by clientId,
// validated, and dropped unanswered when invalid.

const PROTOCOL = 1;
const TOOL_NAME = /^[A-Za-z0-9_.-]{1,128}$/;
const MAX_MESSAGE_BYTES = 1048576; // the seed's default maxMessageBytes
const MAX_FRAME_CHARS = 4 * 1048576; // frames longer than this are dropped unparsed
const MAX_DEPTH = 64;
const MAX_PENDING = 32; // calls in flight; more are refused busy
const ANSWERED_MEMORY = 1000; // answered ids kept to ignore duplicates
const MAX_BUFFERED = 100; // outgoing messages kept while disconnected
const TERMINAL_CLOSE = [4401, 4403, 1008]; // token, origin, policy: retrying cannot help
const FIRST_DELAY_MS = 500;
const MAX_DELAY_MS = 30000;
const HINTS = { readOnlyHint: 'readOnly', destructiveHint: 'destructive', untrustedContentHint: 'untrustedContent' };

/** A random RFC 4122 v4 UUID, from crypto only. */
export function newId() {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** 32-bit FNV-1a over the UTF-8 bytes of text, as 8 lowercase hex digits. */
function fnv1a32(text) {
  let hash = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(text)) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
  return hash.toString(16).padStart(8, '0');
}

/** The seed's llmName: '.' becomes '__'; past 64 chars, the first 55 + '_' + FNV-1a of the name. */
export function llmName(name) {
  const flat = name.replaceAll('.', '__');
  return flat.length <= 64 ? flat : `${flat.slice(0, 55)}_${fnv1a32(name)}`;
}

/** The value as JSON text, with JSON semantics; throws on what JSON would silently mangle. */
function toJsonText(value) {
  return JSON.stringify(value, (_key, v) => {
    if (typeof v === 'function' || typeof v === 'symbol') throw new TypeError(`a ${typeof v} is not JSON`);
    if (typeof v === 'number' && !Number.isFinite(v)) throw new TypeError('a non-finite number is not JSON');
    return v;
  });
}

function depthOf(value, depth = 0) {
  if (depth > MAX_DEPTH) return depth;
  if (value === null || typeof value !== 'object') return depth;
  let max = depth + 1;
  for (const v of Object.values(value)) max = Math.max(max, depthOf(v, depth + 1));
  return max;
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const KEYS = { call: ['id', 'tool', 'input', 'rev'], describe: ['id', 'tool'], cancel: ['id'] };

/** Why an agent→page message (already filtered by clientId and protocol) is invalid, or null. */
function invalidReason(m) {
  const allowed = KEYS[m.type];
  if (!allowed) return 'unknown type';
  for (const key of Object.keys(m)) {
    if (!['protocol', 'type', 'clientId', ...allowed].includes(key)) return `unknown property ${key}`;
  }
  if (typeof m.id !== 'string' || m.id === '') return 'bad id';
  if (m.type !== 'cancel' && !(typeof m.tool === 'string' && TOOL_NAME.test(m.tool))) return 'bad tool';
  if (m.type === 'call' && !isObject(m.input)) return 'bad input';
  if (m.rev !== undefined && !(Number.isInteger(m.rev) && m.rev >= 0)) return 'bad rev';
  return null;
}

/** The manifest summary of one WebMCP tool descriptor, or null when protocol v1 refuses its name. */
function summaryOf(tool) {
  const hints = {};
  for (const [from, to] of Object.entries(HINTS)) {
    if (typeof tool.annotations?.[from] === 'boolean') hints[to] = tool.annotations[from];
  }
  const summary = { name: tool.name, llmName: llmName(tool.name) };
  if (typeof tool.title === 'string' && tool.title !== '') summary.title = tool.title;
  summary.description = typeof tool.description === 'string' ? tool.description : '';
  summary.hints = hints;
  return summary;
}

/**
 * Mirrors the page's WebMCP tools to the gateway. `url`: the page WebSocket,
 * `wss://host/v1/tenants/{tenant}/page` (http(s) is turned into ws(s)); `token`: the page token,
 * or a function returning it (or a promise of it), called for every connection attempt.
 * `modelContext` overrides document.modelContext and navigator.modelContext.
 */
export function connectWebMCP({ url, token, modelContext } = {}) {
  const context = modelContext ?? globalThis.document?.modelContext ?? globalThis.navigator?.modelContext;
  if (!context || typeof context.registerTool !== 'function') throw new TypeError('connectWebMCP: no WebMCP modelContext');
  if (typeof url !== 'string' || (typeof token !== 'string' && typeof token !== 'function')) {
    throw new TypeError('connectWebMCP: url (string) and token (string or function) are required');
  }
  const clientId = newId();
  const tools = new Map(); // name -> descriptor, as registered (with its own execute)
  const pending = new Map(); // call id -> AbortController
  const answered = new Set(); // the last ANSWERED_MEMORY answered ids, oldest first
  const outbox = [];
  const undo = []; // restores what connectWebMCP changed on the context
  let rev = 0;
  let sentKey = null; // the tool list last announced, to send a manifest only on change
  let socket = null;
  let closed = false;
  let delay = FIRST_DELAY_MS;
  let timer = null;

  // ---------------------------------------------------------------- tool list

  function visible() {
    const list = [];
    const flatNames = new Set();
    for (const tool of tools.values()) {
      if (!TOOL_NAME.test(tool.name) || flatNames.has(llmName(tool.name))) continue;
      flatNames.add(llmName(tool.name));
      list.push(tool);
    }
    return list;
  }

  function publish() {
    const summaries = visible().map(summaryOf);
    const key = JSON.stringify(summaries);
    if (key === sentKey) return;
    if (sentKey !== null) rev += 1;
    sentKey = key;
    sendManifest();
  }

  // Manifests are not buffered: every socket that opens hears the current one.
  function sendManifest() {
    if (socket?.readyState !== WebSocket.OPEN) return;
    socket.send(JSON.stringify({ protocol: PROTOCOL, type: 'manifest', clientId, rev, tools: visible().map(summaryOf) }));
  }

  function add(tool, signal) {
    if (typeof tool?.name !== 'string' || typeof tool.execute !== 'function') return;
    if (!TOOL_NAME.test(tool.name)) {
      console.warn(`webmcp: tool ${JSON.stringify(tool.name)} left out: protocol v1 names match ${TOOL_NAME}`);
    } else if ([...tools.keys()].some((n) => n !== tool.name && llmName(n) === llmName(tool.name))) {
      console.warn(`webmcp: tool ${tool.name} left out: its llmName collides with another tool's`);
    }
    tools.set(tool.name, tool);
    signal?.addEventListener('abort', () => remove(tool), { once: true });
    publish();
  }

  function remove(tool) {
    if (tools.get(tool.name) !== tool) return;
    tools.delete(tool.name);
    publish();
  }

  // registerTool (and unregisterTool, where a version has it) are wrapped on this context only:
  // the descriptor keeps its execute, which the registry of the API does not hand back.
  const register = context.registerTool;
  const own = (key, value) => {
    const had = Object.hasOwn(context, key);
    const previous = context[key];
    context[key] = value;
    undo.push(() => (had ? (context[key] = previous) : delete context[key]));
  };
  own('registerTool', async function registerTool(tool, options) {
    const result = await Reflect.apply(register, context, [tool, options]);
    if (!closed && !options?.signal?.aborted) add(tool, options?.signal);
    return result;
  });
  if (typeof context.unregisterTool === 'function') {
    const unregister = context.unregisterTool;
    own('unregisterTool', function unregisterTool(name) {
      const result = Reflect.apply(unregister, context, [name]);
      if (tools.has(name)) remove(tools.get(name));
      return result;
    });
  }
  // With getTools, toolchange also drops tools removed some other way (e.g. by the browser).
  // Only tools known when the event fired are judged: one registered meanwhile may be missing
  // from an older listing.
  const onToolChange = async () => {
    if (typeof context.getTools !== 'function') return;
    const known = [...tools.values()];
    let names;
    try {
      names = new Set((await context.getTools()).map((t) => t.name));
    } catch {
      return; // the registrations' signals still tell
    }
    for (const tool of known) if (!names.has(tool.name)) remove(tool);
  };
  context.addEventListener?.('toolchange', onToolChange);
  Promise.resolve(context.getTools?.())
    .then((list) => list?.some((t) => !tools.has(t.name)) && console.warn('webmcp: tools registered before connectWebMCP are not mirrored; connect first'))
    .catch(() => {});
  undo.push(() => context.removeEventListener?.('toolchange', onToolChange));

  // ---------------------------------------------------------------- answers

  function send(message) {
    if (closed) return;
    if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
    else if (outbox.push(message) > MAX_BUFFERED) outbox.shift();
  }

  function answer(id, result) {
    if (answered.has(id)) return; // exactly once
    answered.add(id);
    if (answered.size > ANSWERED_MEMORY) answered.delete(answered.values().next().value);
    pending.delete(id);
    send({ protocol: PROTOCOL, type: 'result', clientId, id, result });
  }

  const refused = (code, message) => ({ status: 'refused', code, message, rev });

  function describe(m) {
    const tool = visible().find((t) => t.name === m.tool);
    if (!tool) return answer(m.id, refused('unknown_tool', 'No such tool'));
    let inputSchema = { type: 'object', properties: {} };
    try {
      if (isObject(tool.inputSchema)) inputSchema = JSON.parse(toJsonText(tool.inputSchema));
    } catch (err) {
      console.warn(`webmcp: the inputSchema of ${tool.name} is not JSON; described as an object`, err);
    }
    answer(m.id, { status: 'ok', data: { ...summaryOf(tool), inputSchema } });
  }

  async function call(m) {
    const tool = visible().find((t) => t.name === m.tool);
    if (!tool) {
      const stale = m.rev !== undefined && m.rev < rev;
      return answer(m.id, stale ? refused('stale', 'The tool is gone since that revision') : refused('unknown_tool', 'No such tool'));
    }
    if (pending.size >= MAX_PENDING) return answer(m.id, refused('busy', 'Too many calls in flight'));
    const controller = new AbortController();
    pending.set(m.id, controller);
    controller.signal.addEventListener('abort', () => answer(m.id, { status: 'cancelled', by: 'signal' }), { once: true });
    let result;
    try {
      const value = await tool.execute(m.input, { signal: controller.signal });
      try {
        const text = toJsonText(value);
        result = text === undefined ? { status: 'ok' } : { status: 'ok', data: JSON.parse(text) };
      } catch (err) {
        console.error(`webmcp: the result of ${tool.name} is not serializable`, err);
        result = { status: 'error', message: 'Result not serializable' };
      }
    } catch (err) {
      if (controller.signal.aborted) return; // answered cancelled already
      console.error(`webmcp: ${tool.name} failed`, err);
      result = { status: 'error', message: 'Tool failed' };
    }
    if (!controller.signal.aborted) answer(m.id, result);
  }

  function receive(text) {
    if (typeof text !== 'string' || text.length > MAX_FRAME_CHARS) return;
    let m;
    try {
      m = JSON.parse(text);
    } catch {
      return;
    }
    if (!isObject(m) || (typeof m.clientId === 'string' && m.clientId !== clientId)) return;
    if (new TextEncoder().encode(text).length > MAX_MESSAGE_BYTES || depthOf(m) > MAX_DEPTH) {
      return console.warn('webmcp: dropped a message over the size or depth limit');
    }
    if (m.protocol !== PROTOCOL) {
      if (m.clientId === clientId && typeof m.id === 'string') answer(m.id, { status: 'error', message: 'unsupported protocol' });
      return;
    }
    const why = m.clientId === clientId ? invalidReason(m) : 'no clientId';
    if (why) return console.warn(`webmcp: dropped an invalid message (${why})`);
    if (m.type === 'cancel') return pending.get(m.id)?.abort();
    if (pending.has(m.id) || answered.has(m.id)) return; // a duplicate id
    if (m.type === 'describe') describe(m);
    else call(m);
  }

  // ---------------------------------------------------------------- the socket

  async function connect() {
    timer = null;
    let current;
    try {
      const target = new URL(url, globalThis.location?.href);
      target.protocol = target.protocol.replace(/^http/, 'ws');
      target.searchParams.set('token', typeof token === 'function' ? await token() : token);
      if (closed) return;
      current = socket = new WebSocket(target.href);
    } catch (err) {
      console.error('webmcp: cannot connect', err);
      return retry();
    }
    current.onopen = () => {
      delay = FIRST_DELAY_MS;
      sendManifest();
      for (const message of outbox.splice(0)) current.send(JSON.stringify(message));
    };
    current.onmessage = (event) => receive(event.data);
    current.onclose = (event) => {
      if (socket !== current || closed) return;
      socket = null;
      if (TERMINAL_CLOSE.includes(event.code)) {
        console.error(`webmcp: the gateway closed the socket (${event.code} ${event.reason}); not reconnecting`);
        return;
      }
      retry(event.code === 1001 ? 0 : delay);
    };
  }

  function retry(wait = delay) {
    if (closed) return;
    delay = Math.min(delay * 2, MAX_DELAY_MS);
    timer = setTimeout(connect, wait);
  }

  publish(); // rev 0, sent when the socket opens
  connect();

  return {
    clientId,
    close() {
      if (closed) return;
      for (const controller of pending.values()) controller.abort();
      closed = true;
      clearTimeout(timer);
      for (const restore of undo.reverse()) restore();
      socket?.close(1000, 'closed');
      socket = null;
    },
  };
}
