// webmcp.test.mjs: the protocol rules of webmcp.js, in Node against a scripted WebSocket and a
// minimal modelContext (the browser test, gateway/tests/browser/webmcp.test.mjs, runs it for real).
//   node --test webmcp/test/

import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { connectWebMCP, llmName } from '../src/webmcp.js';

const WAIT_MS = 5000;

/** A scripted WebSocket: the test opens it, feeds it frames and reads what the module sent. */
class FakeSocket {
  static OPEN = 1;
  static all = [];
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    FakeSocket.all.push(this);
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close() {
    this.readyState = 3;
  }
  open() {
    this.readyState = FakeSocket.OPEN;
    this.onopen?.();
  }
  receive(message) {
    this.onmessage?.({ data: typeof message === 'string' ? message : JSON.stringify(message) });
  }
  drop(code) {
    this.readyState = 3;
    this.onclose?.({ code, reason: '' });
  }
}
globalThis.WebSocket = FakeSocket;

function modelContext() {
  const context = new EventTarget();
  context.registerTool = async (tool, options) => {
    options?.signal?.throwIfAborted();
  };
  return context;
}

async function eventually(what, fn) {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const value = fn();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const warnings = [];
const errors = [];
console.warn = (...args) => warnings.push(args.join(' '));
console.error = (...args) => errors.push(args.join(' '));

let connection;
afterEach(() => {
  connection?.close();
  FakeSocket.all.length = 0;
  warnings.length = 0;
  errors.length = 0;
});

/** Connects with two tools registered and the socket open; returns {context, socket, clientId}. */
async function connected(extraTools = []) {
  const context = modelContext();
  connection = connectWebMCP({ url: 'http://gw.test/v1/tenants/acme/page', token: 'tok', modelContext: context });
  const socket = await eventually('a socket', () => FakeSocket.all[0]);
  assert.equal(socket.url, 'ws://gw.test/v1/tenants/acme/page?token=tok');
  const echo = {
    name: 'echo.say',
    title: 'Say',
    description: 'Echo the input.',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } } },
    annotations: { readOnlyHint: true, untrustedContentHint: true, destructiveHint: false },
    execute: async (input, { signal }) => ({ input, aborted: signal.aborted, at: new Date(0), gone: undefined }),
  };
  for (const tool of [echo, ...extraTools]) await context.registerTool(tool);
  socket.open();
  return { context, socket, clientId: connection.clientId };
}

const call = (clientId, id, tool, input = {}) => ({ protocol: 1, type: 'call', clientId, id, tool, input });
const results = (socket) => socket.sent.filter((m) => m.type === 'result');

test('the manifest: names protocol v1 refuses are left out, hints from annotations, llmName', async () => {
  const long = `a.${'b'.repeat(70)}`;
  const { socket, clientId } = await connected([
    { name: 'bad name!', description: 'x', execute: async () => 1 },
    { name: long, description: 'long', execute: async () => 1 },
  ]);
  assert.match(clientId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  const manifest = socket.sent.at(-1);
  assert.equal(manifest.type, 'manifest');
  assert.equal(manifest.clientId, clientId);
  assert.deepEqual(manifest.tools.map((t) => t.name), ['echo.say', long]);
  assert.deepEqual(manifest.tools[0], {
    name: 'echo.say', llmName: 'echo__say', title: 'Say', description: 'Echo the input.',
    hints: { readOnly: true, untrustedContent: true, destructive: false },
  });
  assert.equal(manifest.tools[1].llmName, llmName(long));
  assert.match(manifest.tools[1].llmName, /^a__b{52}_[0-9a-f]{8}$/);
  assert.ok(warnings.some((w) => w.includes('bad name!')), warnings.join('\n'));
});

test('frames for other clientIds, invalid frames and other protocols', async () => {
  const { socket, clientId } = await connected();
  socket.receive(call('00000000-0000-4000-8000-000000000000', 'a', 'echo.say'));
  socket.receive('not json');
  socket.receive({ ...call(clientId, 'b', 'echo.say'), extra: 1 });
  socket.receive({ protocol: 1, type: 'call', clientId, id: 'c', tool: 'echo.say' }); // no input
  socket.receive({ protocol: 2, type: 'call', clientId: 'another', id: 'd' });
  socket.receive({ protocol: 2, type: 'call', clientId, id: 'e' });
  let deep = {};
  for (let i = 0; i < 70; i += 1) deep = { deep };
  socket.receive({ ...call(clientId, 'f', 'echo.say', deep), protocol: 2 }); // over the depth limit: dropped first
  socket.receive({ ...call(clientId, 'g', 'echo.say'), tool: 'no such name!' });
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(results(socket), [
    { protocol: 1, type: 'result', clientId, id: 'e', result: { status: 'error', message: 'unsupported protocol' } },
  ]);
});

test('describe and call: inputSchema, JSON semantics, each id answered once', async () => {
  const { socket, clientId, context } = await connected();
  await context.registerTool({ name: 'big.int', description: 'x', execute: async () => ({ n: 1n }) });
  await context.registerTool({ name: 'throws', description: 'x', execute: async () => { throw new Error('secret detail'); } });
  socket.receive({ protocol: 1, type: 'describe', clientId, id: 'd1', tool: 'echo.say' });
  socket.receive({ protocol: 1, type: 'describe', clientId, id: 'd2', tool: 'nope' });
  socket.receive(call(clientId, 'c1', 'echo.say', { text: 'hi' }));
  socket.receive(call(clientId, 'c1', 'echo.say', { text: 'again' }));
  socket.receive(call(clientId, 'c2', 'big.int'));
  socket.receive(call(clientId, 'c3', 'throws'));
  const byId = await eventually('five results', () => {
    const list = results(socket);
    return list.length >= 5 && Object.fromEntries(list.map((m) => [m.id, m.result]));
  });
  assert.equal(results(socket).length, 5);
  assert.deepEqual(byId.d1.data.inputSchema, { type: 'object', properties: { text: { type: 'string' } } });
  assert.equal(byId.d2.code, 'unknown_tool');
  assert.equal(typeof byId.d2.rev, 'number');
  assert.deepEqual(byId.c1, { status: 'ok', data: { input: { text: 'hi' }, aborted: false, at: '1970-01-01T00:00:00.000Z' } });
  assert.deepEqual(byId.c2, { status: 'error', message: 'Result not serializable' });
  assert.deepEqual(byId.c3, { status: 'error', message: 'Tool failed' });
  assert.ok(!JSON.stringify(socket.sent).includes('secret detail'));
  assert.ok(errors.some((e) => e.includes('secret detail')));
});

test('cancel aborts the signal and answers cancelled once', async () => {
  let seen;
  const slow = {
    name: 'slow', description: 'x',
    execute: (input, { signal }) => new Promise((resolve, reject) => {
      seen = signal;
      signal.addEventListener('abort', () => reject(signal.reason));
    }),
  };
  const { socket, clientId } = await connected([slow]);
  socket.receive(call(clientId, 's1', 'slow'));
  await eventually('the call to start', () => seen);
  socket.receive({ protocol: 1, type: 'cancel', clientId, id: 's1' });
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(seen.aborted, true);
  assert.deepEqual(results(socket).map((m) => m.result), [{ status: 'cancelled', by: 'signal' }]);
  assert.deepEqual(errors, []);
});

test('registering and unregistering send the next rev; a rev-old call of a gone tool is stale', async () => {
  const { socket, clientId, context } = await connected();
  const first = socket.sent.at(-1).rev;
  const registration = new AbortController();
  await context.registerTool({ name: 'extra', description: 'x', execute: async () => 1 }, { signal: registration.signal });
  assert.deepEqual([socket.sent.at(-1).rev, socket.sent.at(-1).tools.length], [first + 1, 2]);
  registration.abort();
  assert.deepEqual([socket.sent.at(-1).rev, socket.sent.at(-1).tools.length], [first + 2, 1]);
  socket.receive({ ...call(clientId, 'x1', 'extra'), rev: first + 1 });
  await eventually('the stale answer', () => results(socket).length === 1);
  assert.equal(results(socket)[0].result.code, 'stale');
});

test('a dropped socket reconnects with the same clientId; 4401 ends it; close() restores the context', async () => {
  const { socket, clientId, context } = await connected();
  socket.drop(1006);
  const second = await eventually('a second socket', () => FakeSocket.all[1]);
  second.open();
  assert.equal(second.sent[0].type, 'manifest');
  assert.equal(second.sent[0].clientId, clientId);
  second.drop(4401);
  await new Promise((resolve) => setTimeout(resolve, 700));
  assert.equal(FakeSocket.all.length, 2);
  const wrapped = context.registerTool;
  connection.close();
  assert.notEqual(context.registerTool, wrapped);
});
