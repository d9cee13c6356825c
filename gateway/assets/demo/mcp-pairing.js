// mcp-pairing.js: the page half of desktop MCP pairing. Connects to the toolmark-mcp CLI on
// ws://127.0.0.1:<port>, sends the pairing code (or, after a reload, the session token kept in
// sessionStorage under toolmark:mcp:<port>), then serves the registry to the CLI as a bridge with
// caller mcp. Statuses: connecting, paired, rejected, superseded, disconnected, unreachable.

import { attachBridge } from './bridge.js';

export const DEFAULT_MCP_PORT = 17840;
const MAX_BUFFERED = 100; // outgoing messages kept while reconnecting (oldest evicted)
const REJECTED = [4400, 4401, 4408]; // terminal: the page stops
const SUPERSEDED = 4409; // terminal: a newer pairing took over
const GOING_AWAY = 1001; // the CLI is shutting down: fresh bridge, keep the token, reconnect

/** The sessionStorage key of the session token for a port. */
export const tokenKey = (port) => `toolmark:mcp:${port}`;

function storedToken(port) {
  try {
    return sessionStorage.getItem(tokenKey(port));
  } catch {
    return null;
  }
}

function storeToken(port, token) {
  try {
    if (token === null) sessionStorage.removeItem(tokenKey(port));
    else sessionStorage.setItem(tokenKey(port), token);
  } catch {
    // storage unavailable: pairing still works until the next reload
  }
}

/**
 * Pairs the page with the desktop MCP CLI listening on port.
 * options: {registry, port, code?, onStatus(status), onBridge(bridge | null), baseDelayMs?, maxDelayMs?}.
 * Without a code it resumes with the stored token, and is inert when there is none.
 * Returns detach(): closes the socket, detaches the bridge and stops reconnecting.
 */
export function mcpPairing({ registry, port = DEFAULT_MCP_PORT, code, onStatus = () => {}, onBridge = () => {}, baseDelayMs = 500, maxDelayMs = 30000 }) {
  let pendingCode = typeof code === 'string' && code.trim() !== '' ? code.trim() : null;
  let socket = null;
  let bridge = null;
  let stopped = false;
  let attempt = 0;
  let retryTimer = null;
  const buffer = []; // serialized protocol messages waiting for a paired socket
  const listeners = new Set(); // the bridge's inbound handlers

  const status = (value) => onStatus(value);

  // The transport the bridge sees: it outlives sockets, so a reconnect keeps the page load's calls.
  const transport = {
    send(message) {
      const text = JSON.stringify(message);
      if (socket?.paired && socket.ws.readyState === WebSocket.OPEN) return socket.ws.send(text);
      buffer.push(text);
      if (buffer.length > MAX_BUFFERED) buffer.shift();
    },
    onMessage(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    close() {},
  };

  function attach() {
    if (bridge) return;
    bridge = attachBridge(registry, transport, { caller: 'mcp' });
    onBridge(bridge);
  }

  function detachBridge() {
    if (!bridge) return;
    const old = bridge;
    bridge = null;
    buffer.length = 0;
    listeners.clear();
    old.detach(); // aborts calls still running for the CLI and withdraws their confirmations
    onBridge(null);
  }

  function connect() {
    if (stopped) return;
    const first = pendingCode !== null ? { type: 'pair', code: pendingCode } : { type: 'resume', token: storedToken(port) };
    if (first.type === 'resume' && !first.token) return; // inert: nothing to resume
    status('connecting');
    let ws;
    try {
      ws = new WebSocket(`ws://127.0.0.1:${port}`);
    } catch {
      return retry('unreachable');
    }
    const current = { ws, opened: false, paired: false, first };
    socket = current;
    ws.onopen = () => {
      current.opened = true;
      ws.send(JSON.stringify(first));
    };
    ws.onmessage = (event) => {
      if (socket !== current || typeof event.data !== 'string') return;
      if (!current.paired) {
        let answer;
        try {
          answer = JSON.parse(event.data);
        } catch {
          return;
        }
        if (answer?.type !== 'paired' || typeof answer.token !== 'string') return;
        current.paired = true;
        pendingCode = null; // a code is single use: reconnects resume with the token
        storeToken(port, answer.token);
        attempt = 0;
        status('paired');
        attach();
        while (buffer.length > 0 && ws.readyState === WebSocket.OPEN) ws.send(buffer.shift());
        return;
      }
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return; // non-JSON frames are dropped unparsed
      }
      for (const fn of listeners) fn(message);
    };
    ws.onclose = (event) => {
      if (socket !== current) return;
      socket = null;
      if (stopped) return;
      if (!current.opened) return retry('unreachable');
      if (REJECTED.includes(event.code)) {
        if (event.code === 4401 && current.first.type === 'resume') storeToken(port, null); // a refused token is discarded
        return stop('rejected');
      }
      if (event.code === SUPERSEDED) return stop('superseded');
      if (event.code === GOING_AWAY) detachBridge(); // a fresh bridge after the CLI comes back
      retry(current.paired || bridge ? 'disconnected' : 'connecting');
    };
  }

  function retry(state) {
    status(state);
    const delayMs = Math.min(maxDelayMs, baseDelayMs * 2 ** attempt);
    attempt = Math.min(attempt + 1, 30);
    retryTimer = setTimeout(() => {
      retryTimer = null;
      connect();
    }, delayMs);
  }

  function stop(state) {
    stopped = true;
    clearTimeout(retryTimer);
    detachBridge();
    status(state);
  }

  connect();

  return function detach() {
    if (stopped) return;
    stopped = true;
    clearTimeout(retryTimer);
    const ws = socket?.ws;
    socket = null;
    ws?.close(1000, 'page detached');
    detachBridge();
  };
}
