// echo.js: the demo's Echo transport, for ?transport=echo. What Laravel Echo does for a page,
// in a few lines and without dependencies: the Pusher protocol 7 over a plain WebSocket to the
// gateway's /app/{key}, one private channel toolmark.{user}.{conversation} authorized by the
// app's endpoint (the demo's stand-in for /broadcasting/auth), agent -> page messages as the
// event toolmark.message; page -> agent messages are POSTed to the app's same-origin bridge,
// which forwards them to the gateway. Same interface as websocketTransport: {send, onMessage,
// onStatus, close}. The bridge checks every inbound message; this only unwraps the broadcast.

const MAX_FRAME_UNITS = 4 * 1048576;

/**
 * options: {wsUrl, channel (without "private-"), authUrl, postUrl, event?, onSendError?}.
 * Reconnects with backoff (500 ms doubling, at most 30 s) unless the gateway refused the
 * connection or the subscription (pusher:error 4000-4099).
 */
export function echoTransport(options) {
  const event = options.event ?? 'toolmark.message';
  const channel = `private-${options.channel}`;
  const messageListeners = new Set();
  const statusListeners = new Set();
  let socket = null;
  let closed = false;
  let attempt = 0;
  let retryTimer = null;
  let pingTimer = null;
  let status = { state: 'connecting' };
  let posting = Promise.resolve(); // POSTs leave in order

  function setStatus(state, detail = {}) {
    status = { state, ...detail };
    for (const fn of statusListeners) fn(status);
  }

  function connect() {
    if (closed) return;
    setStatus('connecting', { attempt });
    const ws = new WebSocket(`${options.wsUrl}?protocol=7&client=js&version=demo`);
    socket = ws;
    ws.onmessage = (e) => onEvent(ws, e.data);
    ws.onclose = (e) => {
      clearInterval(pingTimer);
      if (socket !== ws) return;
      socket = null;
      if (closed) return;
      if (e.code >= 4000 && e.code < 4100) {
        closed = true;
        return setStatus('closed', { code: e.code, reason: e.reason, terminal: true });
      }
      const delayMs = Math.min(30000, 500 * 2 ** attempt);
      attempt = Math.min(attempt + 1, 30);
      setStatus('reconnecting', { code: e.code, reason: e.reason, delayMs });
      retryTimer = setTimeout(connect, delayMs);
    };
  }

  async function onEvent(ws, data) {
    if (typeof data !== 'string' || data.length > MAX_FRAME_UNITS) return;
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      return;
    }
    switch (frame.event) {
      case 'pusher:connection_established': {
        const { socket_id: socketId, activity_timeout: activity } = JSON.parse(frame.data);
        pingTimer = setInterval(() => ws.send(JSON.stringify({ event: 'pusher:ping', data: {} })), activity * 1000);
        return subscribe(ws, socketId);
      }
      case 'pusher:ping':
        return ws.send(JSON.stringify({ event: 'pusher:pong', data: {} }));
      case 'pusher_internal:subscription_succeeded':
        attempt = 0;
        return setStatus('connected');
      case 'pusher:error':
        if (frame.data?.code >= 4000 && frame.data?.code < 4100) {
          closed = true;
          setStatus('closed', { code: frame.data.code, reason: frame.data.message, terminal: true });
          ws.close();
        }
        return;
      case event: {
        if (frame.channel !== channel || typeof frame.data !== 'string') return;
        let payload;
        try {
          payload = JSON.parse(frame.data);
        } catch {
          return;
        }
        // A broadcast payload may be the message itself or {message}.
        const message = payload && typeof payload === 'object' && 'message' in payload && !('type' in payload) ? payload.message : payload;
        for (const fn of messageListeners) fn(message);
        return;
      }
      default:
    }
  }

  async function subscribe(ws, socketId) {
    try {
      const res = await fetch(options.authUrl, {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
        body: JSON.stringify({ socket_id: socketId, channel_name: channel }),
      });
      if (!res.ok) throw new Error(`channel authorization answered ${res.status}`);
      const { auth } = await res.json();
      ws.send(JSON.stringify({ event: 'pusher:subscribe', data: { auth, channel } }));
    } catch (err) {
      setStatus('reconnecting', { reason: String(err?.message ?? err), delayMs: 0 });
      ws.close();
    }
  }

  async function post(text) {
    const res = await fetch(options.postUrl, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json', 'X-Requested-With': 'XMLHttpRequest' },
      body: text,
    });
    if (!res.ok) {
      const problem = await res.json().catch(() => ({}));
      throw new Error(`bridge answered ${res.status}${problem.reason ? ` (${problem.reason})` : ''}`);
    }
  }

  connect();

  return {
    /** POSTs the message to the bridge; failures go to onSendError (transport_failed). */
    send(message) {
      if (closed) throw new Error('transport closed');
      const text = JSON.stringify(message);
      posting = posting.then(() => post(text)).catch((err) => options.onSendError?.(err));
      return posting;
    },
    onMessage(fn) {
      messageListeners.add(fn);
      return () => messageListeners.delete(fn);
    },
    onStatus(fn) {
      statusListeners.add(fn);
      fn(status);
      return () => statusListeners.delete(fn);
    },
    close() {
      if (closed && !socket) return;
      closed = true;
      clearTimeout(retryTimer);
      clearInterval(pingTimer);
      const ws = socket;
      socket = null;
      ws?.close(1000, 'page closed');
      setStatus('closed', { code: 1000, reason: 'closed by the page' });
    },
  };
}
