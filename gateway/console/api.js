// The admin API of the gateway that served the console (same origin), with the tab's admin key
// as the Authorization header, and its Server-Sent Events streams read with fetch.

import { state } from './state.js';

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail ?? `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export function describe(err) {
  if (err instanceof ApiError) {
    const code = err.problem?.code ? ` ${err.problem.code}` : '';
    const at = err.problem?.pointer ? ` at ${err.problem.pointer}` : '';
    return `${err.status}${code}: ${err.message}${at}`;
  }
  return `the admin API did not answer (${err.message})`;
}

/** Calls the admin API with the admin key; resolves to {data, etag}, throws ApiError. */
export async function api(method, path, body, headers = {}) {
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
    if (res.status === 401) state.onUnauthorized?.('The admin key was refused (401 unauthorized): sign in again.');
    throw err;
  }
  return { data, etag: res.headers.get('etag') };
}

/**
 * Follows a Server-Sent Events stream of the admin API with fetch (an EventSource cannot send
 * the Authorization header), calling onEvent({id, event, data}) for each, from after `after`
 * (an event id) when given; reconnects after the last id when the stream ends, until `name`
 * is stopped.
 */
export function follow(name, path, onEvent, onError, after = '') {
  stopStream(name);
  const ctl = new AbortController();
  state.streams.set(name, ctl);
  let lastId = after;
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
          if (res.status === 401) state.onUnauthorized?.('The admin key was refused (401 unauthorized): sign in again.');
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

export function parseEvent(block) {
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

export function stopStream(name) {
  state.streams.get(name)?.abort();
  state.streams.delete(name);
}
