// bridge.js: the page side of Toolmark bridge protocol v1, small enough to read in one sitting.
// createRegistry() holds the page's tools; attachBridge() answers the agent's call/describe/cancel
// messages (deferred confirmations included); websocketTransport() carries JSON text frames to the
// gateway and reconnects. Every inbound message is hostile: bounded, copied, filtered, then validated.

export const PROTOCOL = 1;
export const MAX_MESSAGE_BYTES = 1048576;
export const MAX_DEPTH = 64;
export const CONFIRM_EXPIRY_MS = 600000;
export const REDACTED = '[redacted]';

const MAX_FRAME_UNITS = 4 * 1048576; // UTF-16 code units; larger frames are dropped unparsed
const ANSWERED_MEMORY = 1000; // recent call/describe ids whose duplicates are ignored
const MAX_PENDING_PER_SCOPE = 32;
const MAX_CONFIRMATIONS = 100;
const TOOL_NAME = /^[A-Za-z0-9_.-]{1,128}$/;
const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

// ---------------------------------------------------------------- ids and names

/** A random RFC 4122 v4 UUID; never Math.random. */
export function newId() {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** 32-bit FNV-1a over the UTF-8 bytes of text, as 8 lowercase hex digits. */
export function fnv1a32(text) {
  let hash = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(text)) {
    hash = Math.imul(hash ^ byte, 0x01000193);
  }
  return (hash >>> 0).toString(16).padStart(8, '0');
}

/** The LLM-safe name: '.' becomes '__'; past 64 chars, the first 55 + '_' + FNV-1a of the full name. */
export function llmName(name) {
  const flat = name.replaceAll('.', '__');
  return flat.length <= 64 ? flat : `${flat.slice(0, 55)}_${fnv1a32(name)}`;
}

// ---------------------------------------------------------------- results

export const ok = (data) => (data === undefined ? { status: 'ok' } : { status: 'ok', data });
export const invalid = (issues) => ({ status: 'invalid', issues });
export const refused = (code, message, rev) =>
  rev === undefined ? { status: 'refused', code, message } : { status: 'refused', code, message, rev };
const CANCELLED_SIGNAL = Object.freeze({ status: 'cancelled', by: 'signal' });
const TOOL_FAILED = Object.freeze({ status: 'error', message: 'Tool failed' });
const EXPIRED = Object.freeze(
  refused('confirmation_expired', 'The confirmation expired or was already used'),
);

/** Keeps only the fields a ToolResult may carry (top-level messages are strict), or null. */
function normalizeResult(r) {
  switch (r?.status) {
    case 'ok':
      return ok(r.data);
    case 'invalid':
      return invalid(
        Array.from(r.issues ?? [], (i) => ({ path: String(i.path ?? ''), message: String(i.message) })),
      );
    case 'refused':
      return refused(r.code, String(r.message ?? ''), r.rev);
    case 'needs_confirmation':
      return { status: r.status, confirmId: r.confirmId, summary: String(r.summary), changes: r.changes };
    case 'cancelled':
      return { status: 'cancelled', by: r.by };
    case 'error':
      return { status: 'error', message: String(r.message ?? 'Tool failed') };
    default:
      return null;
  }
}

/** A detached JSON copy of a result; a result that is not JSON-safe becomes an error. */
function toWire(result) {
  const normalized = normalizeResult(result);
  if (!normalized) return TOOL_FAILED;
  try {
    return JSON.parse(JSON.stringify(normalized));
  } catch {
    return { status: 'error', message: 'Result not serializable' };
  }
}

// ---------------------------------------------------------------- input validation

/**
 * Checks value against the small JSON Schema subset the demo tools use (type, properties,
 * required, additionalProperties: false, items, enum, minLength, maxLength, pattern,
 * format: "email", minimum, maximum). Returns [{path, message}], empty when valid.
 */
export function checkSchema(schema, value, path = '', issues = []) {
  if (schema === true || schema == null) return issues;
  if (schema === false) return issues.push({ path, message: 'Not allowed' }), issues;
  const types = schema.type === undefined ? null : [].concat(schema.type);
  if (types && !types.some((t) => hasType(t, value))) {
    issues.push({ path, message: `Expected ${types.join(' or ')}` });
    return issues;
  }
  if (schema.enum && !schema.enum.includes(value)) {
    issues.push({ path, message: `Expected one of ${schema.enum.map((v) => JSON.stringify(v)).join(', ')}` });
  }
  if (typeof value === 'string') {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) {
      issues.push({ path, message: schema.minLength === 1 ? 'Required' : `At least ${schema.minLength} characters` });
    } else if (schema.maxLength !== undefined && length > schema.maxLength) {
      issues.push({ path, message: `At most ${schema.maxLength} characters` });
    } else if (schema.format === 'email' && !EMAIL.test(value)) {
      issues.push({ path, message: 'Invalid email' });
    } else if (schema.pattern !== undefined && !new RegExp(schema.pattern, 'u').test(value)) {
      issues.push({ path, message: 'Invalid format' });
    }
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) issues.push({ path, message: `At least ${schema.minimum}` });
    if (schema.maximum !== undefined && value > schema.maximum) issues.push({ path, message: `At most ${schema.maximum}` });
  }
  if (isPlainObject(value)) {
    const properties = schema.properties ?? {};
    for (const key of schema.required ?? []) {
      if (!Object.hasOwn(value, key)) issues.push({ path: joinPath(path, key), message: 'Required' });
    }
    for (const [key, child] of Object.entries(value)) {
      if (Object.hasOwn(properties, key)) checkSchema(properties[key], child, joinPath(path, key), issues);
      else if (schema.additionalProperties === false) issues.push({ path: joinPath(path, key), message: 'Unknown property' });
    }
  }
  if (Array.isArray(value) && schema.items !== undefined) {
    value.forEach((item, i) => checkSchema(schema.items, item, joinPath(path, String(i)), issues));
  }
  return issues;
}

function hasType(type, value) {
  switch (type) {
    case 'object': return isPlainObject(value);
    case 'array': return Array.isArray(value);
    case 'string': return typeof value === 'string';
    case 'integer': return Number.isInteger(value);
    case 'number': return typeof value === 'number' && Number.isFinite(value);
    case 'boolean': return typeof value === 'boolean';
    case 'null': return value === null;
    default: return false;
  }
}

const joinPath = (base, key) => (base ? `${base}.${key}` : key);
const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

// ---------------------------------------------------------------- registry

/**
 * The page's tools. A tool is {name, title?, description, hints?, inputSchema?, run(input, ctx),
 * validate?(input) -> issues, summarize?(input) -> {summary, changes?}, snapshot?() -> JSON}.
 * Every register/unregister is a new revision (rev), announced to subscribers.
 */
export function createRegistry() {
  const tools = new Map();
  const goneAt = new Map(); // name -> first revision without it (tells stale from unknown_tool)
  const listeners = new Set();
  let rev = 0;

  const bump = () => {
    rev += 1;
    for (const fn of listeners) fn(rev);
  };

  const registry = {
    get rev() {
      return rev;
    },
    register(tool) {
      if (typeof tool?.name !== 'string' || !TOOL_NAME.test(tool.name)) throw new Error(`invalid_name: ${tool?.name}`);
      if (typeof tool.description !== 'string' || typeof tool.run !== 'function') {
        throw new Error(`${tool.name}: a tool needs a description and run()`);
      }
      const flat = llmName(tool.name);
      for (const other of tools.values()) {
        if (other.name === tool.name || llmName(other.name) === flat) throw new Error(`duplicate_name: ${tool.name}`);
      }
      tools.set(tool.name, { ...tool, hints: { ...tool.hints }, inputSchema: tool.inputSchema ?? { type: 'object' } });
      goneAt.delete(tool.name);
      bump();
      return () => registry.unregister(tool.name);
    },
    unregister(name) {
      if (!tools.delete(name)) return false;
      goneAt.set(name, rev + 1);
      bump();
      return true;
    },
    get: (name) => tools.get(name),
    list: () => [...tools.values()],
    /** True when the tool existed at revision seenRev and is gone now. */
    goneSince: (name, seenRev) => goneAt.has(name) && seenRev < goneAt.get(name),
    subscribe(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
  };
  return registry;
}

/** The ToolManifestSummary of a registered tool. */
export function summaryOf(tool) {
  const summary = { name: tool.name, llmName: llmName(tool.name) };
  if (tool.title !== undefined) summary.title = tool.title;
  summary.description = tool.description;
  summary.hints = { ...tool.hints };
  if (tool.mode !== undefined) summary.mode = tool.mode;
  return summary;
}

const needsConfirmation = (tool) => Boolean(tool.hints.consequential || tool.hints.destructive);

// ---------------------------------------------------------------- inbound checks

/** UTF-8 length of a string without allocating (lone surrogates count as U+FFFD, 3 bytes). */
function utf8Length(text) {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      bytes += 4;
      i++;
    } else bytes += 3;
  }
  return bytes;
}

/** True when objects/arrays nest deeper than limit (cycles count as too deep). Iterative. */
function tooDeep(value, limit = MAX_DEPTH) {
  const stack = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop();
    if (v === null || typeof v !== 'object') continue;
    if (depth > limit) return true;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return false;
}

/** A plain-data copy of an inbound message, or undefined when it is too large, too deep or not JSON. */
function boundedCopy(raw, maxBytes) {
  try {
    let text = raw;
    if (typeof raw !== 'string') {
      if (tooDeep(raw)) return undefined;
      text = JSON.stringify(raw);
    }
    if (typeof text !== 'string' || utf8Length(text) > maxBytes) return undefined;
    const copy = JSON.parse(text);
    return tooDeep(copy) ? undefined : copy;
  } catch {
    return undefined;
  }
}

const isId = (v) => typeof v === 'string' && v.length >= 1 && v.length <= 128;

// Agent -> page messages: allowed and required properties (top level is strict).
const INBOUND = new Map([
  ['call', { allowed: ['protocol', 'type', 'clientId', 'id', 'rev', 'tool', 'input'], required: ['id', 'tool', 'input'] }],
  ['describe', { allowed: ['protocol', 'type', 'clientId', 'id', 'tool'], required: ['id', 'tool'] }],
  ['cancel', { allowed: ['protocol', 'type', 'clientId', 'id'], required: ['id'] }],
]);

/** Why an agent -> page message is invalid, or null when it is valid. */
function inboundProblem(m) {
  const shape = INBOUND.get(m.type);
  if (!shape) return `not an agent-to-page message type: ${String(m.type).slice(0, 40)}`;
  for (const key of Object.keys(m)) if (!shape.allowed.includes(key)) return `unknown property ${key.slice(0, 40)}`;
  for (const key of shape.required) if (!Object.hasOwn(m, key)) return `missing ${key}`;
  if (!isId(m.clientId) || !isId(m.id)) return 'bad id';
  if (Object.hasOwn(m, 'tool') && !(typeof m.tool === 'string' && TOOL_NAME.test(m.tool))) return 'bad tool name';
  if (Object.hasOwn(m, 'rev') && !(Number.isSafeInteger(m.rev) && m.rev >= 0)) return 'bad rev';
  return null;
}

// ---------------------------------------------------------------- bridge

function createEmitter() {
  const handlers = new Map();
  return {
    on(type, fn) {
      if (!handlers.has(type)) handlers.set(type, new Set());
      handlers.get(type).add(fn);
      return () => handlers.get(type).delete(fn);
    },
    emit(type, payload) {
      for (const fn of handlers.get(type) ?? []) {
        try {
          fn(payload);
        } catch (err) {
          console.error(`bridge ${type} listener failed`, err);
        }
      }
    },
  };
}

/** Settles with the promise, or with cancelled/signal as soon as signal aborts. */
function untilAborted(promise, signal) {
  return new Promise((resolve, reject) => {
    const onAbort = () => resolve(CANCELLED_SIGNAL);
    signal.addEventListener('abort', onAbort, { once: true });
    Promise.resolve(promise)
      .then(resolve, reject)
      .finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/**
 * Attaches the page side of protocol v1 to a transport ({send, onMessage, close?}).
 * options.caller is 'inapp' (the default: consequential tools answer needs_confirmation and the
 * outcome follows as confirmed) or 'mcp' (the desktop MCP CLI: the call waits while the human
 * confirms inline, and its result is the outcome; detaching withdraws such confirmations).
 * Returns {clientId, caller, on(type, fn), pending(), approve(confirmId), reject(confirmId), detach()}.
 * Events: 'received' (a valid inbound message), 'sent' (an outbound message), 'pending'
 * (the list of deferred confirmations changed), 'error' ({code, message}).
 */
export function attachBridge(registry, transport, options = {}) {
  const maxMessageBytes = options.maxMessageBytes ?? MAX_MESSAGE_BYTES;
  const confirmExpiryMs = options.confirmExpiryMs ?? CONFIRM_EXPIRY_MS;
  const caller = options.caller ?? 'inapp';
  if (caller !== 'inapp' && caller !== 'mcp') throw new Error(`unsupported caller ${caller}`);
  const clientId = newId();
  const events = createEmitter();
  const inFlight = new Map(); // call id -> AbortController, until answered
  const answered = new Set(); // the last ANSWERED_MEMORY answered ids, oldest first
  const scopes = new Map(); // scope -> {tail: Promise, pending: number}; calls run in order per scope
  const confirmations = new Map(); // confirmId -> pending confirmation, oldest first
  let detached = false;

  const fail = (code, message) => events.emit('error', { code, message });

  function send(message) {
    if (detached) return;
    try {
      transport.send(message);
      events.emit('sent', message);
    } catch (err) {
      fail('transport_failed', String(err?.message ?? err));
    }
  }

  const sendManifest = () =>
    send({ protocol: PROTOCOL, type: 'manifest', clientId, rev: registry.rev, tools: registry.list().map(summaryOf) });

  function answer(id, result) {
    inFlight.delete(id);
    answered.add(id);
    if (answered.size > ANSWERED_MEMORY) answered.delete(answered.values().next().value);
    send({ protocol: PROTOCOL, type: 'result', clientId, id, result: toWire(result) });
  }

  const seen = (id) => inFlight.has(id) || answered.has(id);

  function onInbound(raw) {
    if (detached) return;
    const message = boundedCopy(raw, maxMessageBytes);
    if (!isPlainObject(message)) return fail('invalid_message', 'too large, too deep, not JSON or not an object');
    if (typeof message.clientId === 'string' && message.clientId !== clientId) return; // another page's: silent
    if (message.protocol !== PROTOCOL) {
      if (message.clientId === clientId && isId(message.id) && !seen(message.id)) {
        return answer(message.id, { status: 'error', message: 'unsupported protocol' });
      }
      return fail('invalid_message', 'unsupported protocol');
    }
    const problem = inboundProblem(message);
    if (problem) return fail('invalid_message', problem);
    if (message.type === 'cancel') return cancel(message.id);
    if (seen(message.id)) return; // rule 2: answered exactly once
    events.emit('received', message);
    if (message.type === 'describe') return describe(message);
    return call(message);
  }

  function cancel(id) {
    const controller = inFlight.get(id);
    if (!controller) return;
    events.emit('received', { type: 'cancel', id });
    controller.abort();
    answer(id, CANCELLED_SIGNAL);
  }

  function describe({ id, tool: name }) {
    const tool = registry.get(name);
    if (!tool) return answer(id, refused('unknown_tool', `No tool named ${name}`, registry.rev));
    answer(id, ok({ ...summaryOf(tool), inputSchema: tool.inputSchema }));
  }

  function call({ id, tool: name, input, rev }) {
    const tool = registry.get(name);
    if (!tool) {
      const stale = rev !== undefined && rev < registry.rev && registry.goneSince(name, rev);
      return answer(id, stale
        ? refused('stale', 'The tool is gone since that revision; read the latest manifest', registry.rev)
        : refused('unknown_tool', `No tool named ${name}`, registry.rev));
    }
    const scope = scopeOf(name);
    if ((scopes.get(scope)?.pending ?? 0) >= MAX_PENDING_PER_SCOPE) {
      return answer(id, refused('busy', 'Too many pending calls for this part of the page'));
    }
    const controller = new AbortController();
    inFlight.set(id, controller);
    inScope(scope, () => execute(tool, input, controller.signal)).then((result) => {
      if (inFlight.get(id) === controller) answer(id, result);
      else if (result !== CANCELLED_SIGNAL) fail('late_result', `${name} settled after its call was cancelled`);
    });
  }

  const scopeOf = (name) => (name.includes('.') ? name.slice(0, name.lastIndexOf('.')) : '');

  /** Runs job after the scope's earlier jobs; never rejects. */
  function inScope(scope, job) {
    const queue = scopes.get(scope) ?? { tail: Promise.resolve(), pending: 0 };
    scopes.set(scope, queue);
    queue.pending += 1;
    const run = queue.tail.then(job).finally(() => {
      queue.pending -= 1;
      if (queue.pending === 0 && scopes.get(scope) === queue) scopes.delete(scope);
    });
    queue.tail = run.catch(() => {});
    return run;
  }

  /** Validates input, defers (inapp) or confirms inline (mcp) consequential tools, else runs the tool. */
  async function execute(tool, input, signal) {
    if (signal.aborted) return CANCELLED_SIGNAL;
    try {
      const issues = checkSchema(tool.inputSchema, input);
      if (issues.length === 0 && tool.validate) issues.push(...(tool.validate(input) ?? []));
      if (issues.length > 0) return invalid(issues);
      if (needsConfirmation(tool)) return caller === 'mcp' ? await confirmInline(tool, input, signal) : defer(tool, input);
      return await untilAborted(tool.run(input, { signal, caller, clientId }), signal);
    } catch (err) {
      fail('tool_threw', `${tool.name}: ${err?.message ?? err}`);
      return TOOL_FAILED;
    }
  }

  // ------------------------------------------------ deferred confirmations

  /** Records a pending confirmation; settle (inline only) receives the final outcome. */
  function addConfirmation(tool, input, settle) {
    const { summary, changes } = tool.summarize?.(input) ?? { summary: `Run ${tool.title ?? tool.name}` };
    while (confirmations.size >= MAX_CONFIRMATIONS) expire(confirmations.keys().next().value);
    const confirmId = newId();
    const createdAt = Date.now();
    confirmations.set(confirmId, {
      confirmId,
      caller,
      tool: tool.name,
      title: tool.title ?? tool.name,
      input,
      summary: String(summary),
      changes: changes ?? [],
      snapshot: tool.snapshot ? JSON.stringify(tool.snapshot()) : undefined,
      settle,
      createdAt,
      expiresAt: createdAt + confirmExpiryMs,
      timer: setTimeout(() => expire(confirmId), confirmExpiryMs),
    });
    return { confirmId, summary: String(summary), changes };
  }

  function defer(tool, input) {
    const { confirmId, summary, changes } = addConfirmation(tool, input, undefined);
    // Announce after the needs_confirmation result has been sent (it is sent from a later microtask).
    setTimeout(() => events.emit('pending', pending()), 0);
    return { status: 'needs_confirmation', confirmId, summary, changes };
  }

  /**
   * Caller mcp: the call waits for the human. Settles with the tool's outcome (approved), cancelled
   * by operator (rejected), confirmation_expired, or cancelled by signal when the call is aborted
   * (cancel, or the bridge detached): then the confirmation is withdrawn and can never run the tool.
   */
  function confirmInline(tool, input, signal) {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve(CANCELLED_SIGNAL);
      const settle = (result) => {
        signal.removeEventListener('abort', withdraw);
        resolve(result);
      };
      const { confirmId } = addConfirmation(tool, input, settle);
      function withdraw() {
        if (take(confirmId)) settle(CANCELLED_SIGNAL);
      }
      signal.addEventListener('abort', withdraw, { once: true });
      events.emit('pending', pending());
    });
  }

  /** Removes a pending confirmation (single use) and returns it, or undefined. */
  function take(confirmId) {
    const entry = confirmations.get(confirmId);
    if (!entry) return undefined;
    confirmations.delete(confirmId);
    clearTimeout(entry.timer);
    events.emit('pending', pending());
    return entry;
  }

  const sendConfirmed = (confirmId, result) =>
    send({ protocol: PROTOCOL, type: 'confirmed', clientId, confirmId, result: toWire(result) });

  function expire(confirmId) {
    const entry = take(confirmId);
    if (!entry) return;
    if (entry.settle) entry.settle(EXPIRED);
    else sendConfirmed(confirmId, EXPIRED);
  }

  /** The pending confirmations, oldest first, as plain data for the UI. */
  function pending() {
    return [...confirmations.values()].map(({ timer, snapshot, input, settle, ...visible }) => structuredClone(visible));
  }

  /**
   * A human approved: runs the tool as caller human. Deferred (inapp): sends confirmed with the
   * outcome. Inline (mcp): the waiting call answers with it. A withdrawn confirmation never runs.
   */
  async function approve(confirmId) {
    if (detached) return EXPIRED;
    const entry = take(confirmId);
    if (!entry) return EXPIRED;
    const tool = registry.get(entry.tool);
    const runAsHuman = async () => {
      try {
        return await tool.run(entry.input, { signal: new AbortController().signal, caller: 'human', clientId });
      } catch (err) {
        fail('tool_threw', `${tool.name}: ${err?.message ?? err}`);
        return TOOL_FAILED;
      }
    };
    let result;
    if (!tool) {
      result = refused('stale', 'The tool is gone from the page', registry.rev);
    } else if (entry.snapshot !== undefined && JSON.stringify(tool.snapshot()) !== entry.snapshot) {
      result = refused('stale', 'Form changed since confirmation was requested');
    } else if (entry.settle) {
      result = await runAsHuman(); // already inside the call's scope job
    } else {
      result = await inScope(scopeOf(tool.name), runAsHuman);
    }
    if (entry.settle) entry.settle(result);
    else sendConfirmed(confirmId, result);
    return toWire(result);
  }

  /** A human rejected: confirmed carries cancelled by operator. */
  function reject(confirmId) {
    const entry = take(confirmId);
    if (!entry) return EXPIRED;
    const result = { status: 'cancelled', by: 'operator' };
    if (entry.settle) entry.settle(result);
    else sendConfirmed(confirmId, result);
    return result;
  }

  function detach() {
    if (detached) return;
    detached = true; // nothing is sent from here on, and no confirmation can be approved
    for (const controller of inFlight.values()) controller.abort();
    for (const entry of confirmations.values()) clearTimeout(entry.timer);
    const hadConfirmations = confirmations.size > 0;
    confirmations.clear();
    if (hadConfirmations) events.emit('pending', []);
    offRegistry();
    offMessages?.();
    transport.close?.();
  }

  const offRegistry = registry.subscribe(() => sendManifest());
  const offMessages = transport.onMessage(onInbound);
  queueMicrotask(sendManifest); // the attach manifest, after the caller has subscribed to 'sent'

  return { clientId, caller, on: events.on, pending, approve, reject, detach };
}

// ---------------------------------------------------------------- websocket transport

/**
 * A reconnecting WebSocket transport. urlFn() (may be async) gives the ws(s):// URL for each
 * attempt, so a fresh token can be fetched. Retries with exponential backoff (500 ms doubling,
 * capped at maxDelayMs) until a terminal close code or close(); buffers up to 100 outgoing
 * messages while disconnected (oldest evicted). Returns {send, onMessage, onStatus, close}.
 * Status: {state: 'connecting'|'connected'|'reconnecting'|'closed', code?, reason?, delayMs?}.
 */
export function websocketTransport(urlFn, options = {}) {
  const baseDelayMs = options.baseDelayMs ?? 500;
  const maxDelayMs = options.maxDelayMs ?? 30000;
  const terminalCloseCodes = options.terminalCloseCodes ?? [4401, 4403, 1008];
  const maxBuffered = options.maxBuffered ?? 100;
  const stableMs = 10000; // a connection open this long resets the backoff

  const messageListeners = new Set();
  const statusListeners = new Set();
  const buffer = []; // serialized messages waiting for an open socket
  let socket = null;
  let retryTimer = null;
  let attempt = 0;
  let closed = false;
  let status = { state: 'connecting' };

  function setStatus(state, detail = {}) {
    status = { state, ...detail };
    for (const fn of statusListeners) fn(status);
  }

  async function connect() {
    if (closed) return;
    setStatus('connecting', { attempt });
    let ws;
    try {
      const url = await urlFn();
      if (closed) return;
      ws = new WebSocket(url);
    } catch (err) {
      return retry({ reason: String(err?.message ?? err) });
    }
    socket = ws;
    let openedAt = 0;
    ws.onopen = () => {
      openedAt = Date.now();
      setStatus('connected');
      while (buffer.length > 0 && ws.readyState === WebSocket.OPEN) ws.send(buffer.shift());
    };
    ws.onmessage = (event) => deliver(event.data);
    ws.onclose = (event) => {
      if (socket !== ws) return;
      socket = null;
      if (openedAt && Date.now() - openedAt >= stableMs) attempt = 0;
      if (closed) return;
      if (terminalCloseCodes.includes(event.code)) {
        closed = true;
        return setStatus('closed', { code: event.code, reason: event.reason, terminal: true });
      }
      retry({ code: event.code, reason: event.reason });
    };
  }

  function retry(detail) {
    const delayMs = Math.min(maxDelayMs, baseDelayMs * 2 ** attempt);
    attempt = Math.min(attempt + 1, 30);
    setStatus('reconnecting', { ...detail, delayMs });
    retryTimer = setTimeout(() => {
      retryTimer = null;
      connect();
    }, delayMs);
  }

  // Binary, oversized and non-JSON frames are dropped unparsed; the bridge checks the rest.
  function deliver(data) {
    if (typeof data !== 'string' || data.length > MAX_FRAME_UNITS) return;
    let message;
    try {
      message = JSON.parse(data);
    } catch {
      return;
    }
    for (const fn of messageListeners) fn(message);
  }

  connect();

  return {
    send(message) {
      if (closed) throw new Error('transport closed');
      const text = JSON.stringify(message);
      if (socket?.readyState === WebSocket.OPEN) return socket.send(text);
      buffer.push(text);
      if (buffer.length > maxBuffered) buffer.shift();
    },
    onMessage(fn) {
      messageListeners.add(fn);
      return () => messageListeners.delete(fn);
    },
    /** Calls fn with the current status now and on every change; returns an unsubscribe. */
    onStatus(fn) {
      statusListeners.add(fn);
      fn(status);
      return () => statusListeners.delete(fn);
    },
    close() {
      if (closed && !socket) return;
      closed = true;
      clearTimeout(retryTimer);
      const ws = socket;
      socket = null;
      ws?.close(1000, 'page closed');
      setStatus('closed', { code: 1000, reason: 'closed by the page' });
    },
  };
}
