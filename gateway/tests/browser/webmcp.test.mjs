// webmcp.test.mjs: a WebMCP page reaches server agents. In headless Chromium, a test page loads
// @mcp-b/webmcp-polyfill (and, in the last test, Chromium's native WebMCP with
// --enable-features=WebMCP, which the polyfill leaves in place), registers three tools
// through document.modelContext and connects them with the gateway's GET /v1/webmcp.js. This test
// plays the agent over HTTP (dev API key): llm-tools, calls, a cancel, the hosted MCP endpoint;
// the page swaps a tool and reloads.
//
// Run against a started gateway (dev mode):
//   BASE_URL=http://127.0.0.1:PORT API_KEY=<dev key> TENANT=dev node --test webmcp.test.mjs
// Needs playwright-core and @mcp-b/webmcp-polyfill (npm install in this folder) and Debian's
// chromium at /usr/bin/chromium.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

const BASE_URL = (process.env.BASE_URL ?? '').replace(/\/+$/, '');
const API_KEY = process.env.API_KEY ?? '';
const TENANT = process.env.TENANT ?? 'dev';
const WAIT_MS = 15000; // every wait is bounded by this
const TEST_TIMEOUT_MS = 60000;
const SLOW_MS = 5000; // how long report.slow takes

const user = 'webmcp';
const conversation = `w-${randomUUID()}`;
const apiBase = `${BASE_URL}/v1/tenants/${TENANT}`;
const conversationUrl = `${apiBase}/users/${user}/conversations/${conversation}`;
const PAGE_URL = `${BASE_URL}/webmcp-test/page.html`; // served by this test (page.route), same origin as the gateway
// The page imports the module from the gateway's other loopback name, another origin, as an app
// does from its own site: the module's CORS header is part of what is tested.
const MODULE_URL = `${BASE_URL.replace('//127.0.0.1:', '//localhost:')}/v1/webmcp.js`;

let polyfill;
try {
  polyfill = readFileSync(createRequire(import.meta.url).resolve('@mcp-b/webmcp-polyfill/iife'), 'utf8');
} catch {
  throw new Error('@mcp-b/webmcp-polyfill is missing: run npm install in gateway/tests/browser');
}

// The test page: the polyfill, the gateway's module, three tools and window.testPage for the test.
const TEST_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>WebMCP test page</title><link rel="icon" href="data:,">
<script src="/webmcp-test/polyfill.js"></script>
<script type="module">
import { connectWebMCP } from '${MODULE_URL}';

const context = document.modelContext;
const connection = connectWebMCP({ url: '/v1/tenants/${TENANT}/page', token: () => window.mintPageToken() });
const notes = ['first note', 'second note'];
const registrations = new Map(); // tool name -> AbortController
const seen = { slowStarted: 0, slowAborted: 0 };

async function register(tool) {
  const registration = new AbortController();
  registrations.set(tool.name, registration);
  await context.registerTool(tool, { signal: registration.signal });
}

const sleep = (ms, signal) => new Promise((resolve, reject) => {
  const timer = setTimeout(resolve, ms);
  signal?.addEventListener('abort', () => { clearTimeout(timer); reject(signal.reason); }, { once: true });
});

await register({
  name: 'notes.read', title: 'Read the notes',
  description: 'List the notes on the page. Their texts were typed by the user.',
  inputSchema: { type: 'object', properties: {} },
  annotations: { readOnlyHint: true, untrustedContentHint: true },
  execute: async () => ({ notes: [...notes], checkedAt: new Date(0), draft: undefined }),
});
await register({
  name: 'notes.clear', title: 'Delete every note',
  description: 'Delete every note on the page.',
  inputSchema: { type: 'object', properties: {} },
  annotations: { destructiveHint: true },
  execute: async () => { const cleared = notes.length; notes.length = 0; return { cleared }; },
});
await register({
  name: 'report.slow', title: 'Build a report',
  description: 'Build a report of the notes; takes ${SLOW_MS / 1000} seconds.',
  inputSchema: { type: 'object', properties: {} },
  execute: async (input, options) => {
    seen.slowStarted += 1;
    try {
      await sleep(${SLOW_MS}, options?.signal);
    } catch (err) {
      seen.slowAborted += 1;
      throw err;
    }
    return { report: notes.length + ' notes' };
  },
});

window.testPage = {
  clientId: connection.clientId,
  seen,
  notes,
  async swap() {
    registrations.get('notes.clear').abort();
    await register({
      name: 'notes.add', title: 'Add a note',
      description: 'Add one note to the page.',
      inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
      execute: async ({ text }) => { notes.push(text); return { count: notes.length }; },
    });
  },
};
</script></head><body><h1>WebMCP test page</h1></body></html>`;

let browser;
let page;
const pageProblems = []; // console errors and uncaught page errors, shown at the end

// ---------------------------------------------------------------- helpers

/** Calls the agent API; returns {status, body}. */
async function api(method, url, body, headers = {}) {
  const res = await fetch(url, {
    method,
    headers: {
      Authorization: `Bearer ${API_KEY}`,
      Accept: 'application/json',
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(WAIT_MS),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** Mints a token of the conversation: a page token, or an MCP token with scope 'mcp'. */
async function mint(scope) {
  const { status, body } = await api('POST', `${apiBase}/tokens`, { user, conversation, scope, ttlSeconds: 600 });
  assert.equal(status, 201, `POST tokens: ${status} ${JSON.stringify(body)}`);
  return body.token;
}

/** Calls a page tool through the agent API and returns the 200 answer {id, clientId, outcome}. */
async function callTool(tool, input = {}) {
  const { status, body } = await api('POST', `${conversationUrl}/calls`, { tool, input, timeoutMs: 10000 });
  assert.equal(status, 200, `POST calls ${tool}: ${status} ${JSON.stringify(body)}`);
  return body;
}

/** Polls fn until it returns a truthy value or WAIT_MS passes. */
async function eventually(what, fn) {
  const deadline = Date.now() + WAIT_MS;
  let last;
  for (;;) {
    try {
      const value = await fn();
      if (value) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${WAIT_MS} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The conversation's state once its page (clientId) publishes exactly `names`. */
function toolsAre(clientId, names) {
  return eventually(`the tools ${names.join(', ')} of ${clientId}`, async () => {
    const { status, body } = await api('GET', conversationUrl);
    const listed = status === 200 && body.clientId === clientId ? body.tools.map((t) => t.name).sort() : [];
    return JSON.stringify(listed) === JSON.stringify([...names].sort()) ? body : null;
  });
}

/** A session of the hosted MCP endpoint; request(method, params) answers the JSON-RPC result. */
async function mcpSession() {
  const token = await mint('mcp');
  const url = `${apiBase}/mcp`;
  let session;
  let nextId = 1;
  async function post(message) {
    const res = await fetch(url, {
      method: 'POST',
      headers: {
        Authorization: `Bearer ${token}`,
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
        ...(session ? { 'Mcp-Session-Id': session } : {}),
      },
      body: JSON.stringify(message),
      signal: AbortSignal.timeout(WAIT_MS),
    });
    session ??= res.headers.get('mcp-session-id') ?? undefined;
    const text = await res.text();
    assert.ok(res.status < 300, `MCP ${message.method}: ${res.status} ${text}`);
    if (!('id' in message)) return undefined;
    const json = (res.headers.get('content-type') ?? '').startsWith('text/event-stream')
      ? text.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).filter(Boolean)
        .map((data) => JSON.parse(data)).find((m) => m.id === message.id)
      : JSON.parse(text);
    assert.ok(json && !json.error, `MCP ${message.method}: ${text}`);
    return json.result;
  }
  const request = (method, params = {}) => post({ jsonrpc: '2.0', id: nextId++, method, params });
  await request('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'webmcp-test', version: '1' } });
  await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  return { request };
}

/** Headless Chromium with these extra flags. */
function launch(extraArgs = []) {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    timeout: WAIT_MS,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-quic', '--no-first-run', '--disable-sync',
      // The test page is fulfilled by page.route, so Chromium cannot tell it comes from the
      // loopback gateway and would block its socket as a public page reaching a local address.
      '--disable-features=LocalNetworkAccessChecks', ...extraArgs],
  });
}

/** A tab of `on` that serves the test page and the polyfill, and mints page tokens. */
async function testTab(on, label) {
  const tab = await on.newPage();
  tab.setDefaultTimeout(WAIT_MS);
  tab.on('console', (msg) => msg.type() === 'error' && pageProblems.push(`${label} console: ${msg.text()}`));
  tab.on('pageerror', (err) => pageProblems.push(`${label} pageerror: ${err.message}`));
  await tab.route(PAGE_URL, (route) => route.fulfill({ contentType: 'text/html; charset=utf-8', body: TEST_PAGE }));
  await tab.route(`${BASE_URL}/webmcp-test/polyfill.js`, (route) =>
    route.fulfill({ contentType: 'text/javascript; charset=utf-8', body: polyfill }));
  // The token step: the page asks its backend (here, this test) for a page token on every attempt.
  await tab.exposeFunction('mintPageToken', () => mint('page'));
  return tab;
}

async function openTestPage(tab = page) {
  await tab.goto(PAGE_URL, { timeout: WAIT_MS });
  await tab.waitForFunction(() => window.testPage?.clientId, null, { timeout: WAIT_MS });
  const clientId = await tab.evaluate(() => window.testPage.clientId);
  assert.match(clientId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  return clientId;
}

// ---------------------------------------------------------------- lifecycle

before(async () => {
  assert.ok(BASE_URL, 'set BASE_URL to the gateway, e.g. http://127.0.0.1:8080');
  assert.ok(API_KEY, 'set API_KEY to the dev tenant API key printed by toolmark-gateway at start');
  browser = await launch();
  page = await testTab(browser, 'page');
});

after(async () => {
  if (pageProblems.length > 0) console.error(`page problems:\n  ${pageProblems.join('\n  ')}`);
  await browser?.close();
});

// ---------------------------------------------------------------- tests (run in order, one page)

let clientId;

test('the page\'s WebMCP tools are listed with their hints, through llm-tools and MCP', { timeout: TEST_TIMEOUT_MS }, async (t) => {
  clientId = await openTestPage();
  const polyfilled = await page.evaluate(() => document.modelContext.__isWebMCPPolyfill === true);
  t.diagnostic(`document.modelContext: ${polyfilled ? '@mcp-b/webmcp-polyfill' : 'native'}`);
  const state = await toolsAre(clientId, ['notes.clear', 'notes.read', 'report.slow']);
  const byName = Object.fromEntries(state.tools.map((t) => [t.name, t]));
  assert.deepEqual(byName['notes.read'].hints, { readOnly: true, untrustedContent: true });
  assert.deepEqual(byName['notes.clear'].hints, { destructive: true });
  assert.deepEqual(byName['report.slow'].hints, {});
  assert.equal(byName['notes.read'].llmName, 'notes__read');
  assert.equal(byName['notes.read'].title, 'Read the notes');

  const { status, body } = await api('GET', `${conversationUrl}/llm-tools`);
  assert.equal(status, 200);
  const pageCall = body.tools.find((t) => t.name === 'page_call');
  for (const name of ['notes.clear', 'notes.read', 'report.slow']) assert.match(pageCall.description, new RegExp(`- ${name} — `));

  const described = await api('POST', `${conversationUrl}/describe`, { tool: 'notes.read' });
  assert.equal(described.status, 200, JSON.stringify(described.body));
  assert.deepEqual(described.body.outcome.data.inputSchema, { type: 'object', properties: {} });

  const mcp = await mcpSession();
  const listed = await mcp.request('tools/list');
  const names = listed.tools.map((t) => t.name).sort();
  assert.deepEqual(names, ['notes__clear', 'notes__read', 'report__slow']);
  assert.equal(listed.tools.find((t) => t.name === 'notes__read').annotations?.readOnlyHint, true);
});

test('the agent calls each tool: JSON results, the destructive one, the slow one through MCP', { timeout: TEST_TIMEOUT_MS }, async () => {
  const read = await callTool('notes.read');
  assert.equal(read.clientId, clientId);
  // JSON semantics: the Date by its toJSON, the undefined property dropped.
  assert.deepEqual(read.outcome, { status: 'ok', data: { notes: ['first note', 'second note'], checkedAt: '1970-01-01T00:00:00.000Z' } });

  const invoked = await api('POST', `${conversationUrl}/llm-tools/invoke`, { name: 'page_call', input: { tool: 'notes.read' } });
  assert.equal(invoked.status, 200);
  assert.equal(invoked.body.content.untrustedContent, true, 'untrustedContentHint reaches the agent');

  const cleared = await callTool('notes.clear');
  assert.deepEqual(cleared.outcome, { status: 'ok', data: { cleared: 2 } });
  assert.deepEqual(await page.evaluate(() => window.testPage.notes), []);

  const mcp = await mcpSession();
  const started = Date.now();
  const result = await mcp.request('tools/call', { name: 'report__slow', arguments: {} });
  assert.ok(Date.now() - started >= SLOW_MS - 100, 'the call waited for the tool');
  assert.ok(!result.isError, JSON.stringify(result));
  assert.deepEqual(result.structuredContent, { status: 'ok', data: { report: '0 notes' } });
});

test('cancelling the slow call aborts its signal; the outcome is cancelled', { timeout: TEST_TIMEOUT_MS }, async () => {
  const before = await page.evaluate(() => window.testPage.seen.slowStarted);
  const started = await api('POST', `${conversationUrl}/calls`, { tool: 'report.slow', input: {}, timeoutMs: 20000 },
    { Prefer: 'respond-async' });
  assert.equal(started.status, 202, JSON.stringify(started.body));
  const callId = started.body.id;
  await page.waitForFunction((n) => window.testPage.seen.slowStarted > n, before, { timeout: WAIT_MS });

  const cancel = await api('POST', `${apiBase}/calls/${callId}/cancel`);
  assert.equal(cancel.status, 202);
  const done = await eventually('the cancelled outcome', async () => {
    const { body } = await api('GET', `${apiBase}/calls/${callId}`);
    return body.state !== 'pending' ? body : null;
  });
  assert.equal(done.state, 'answered');
  assert.deepEqual(done.outcome, { status: 'cancelled', by: 'signal' });
  assert.equal(await page.evaluate(() => window.testPage.seen.slowAborted), 1);
});

test('unregistering one tool and registering another: the listings follow', { timeout: TEST_TIMEOUT_MS }, async () => {
  const { body: old } = await api('GET', conversationUrl);
  await page.evaluate(() => window.testPage.swap());
  const state = await toolsAre(clientId, ['notes.add', 'notes.read', 'report.slow']);
  assert.ok(state.rev > old.rev, `rev ${state.rev} after ${old.rev}`);

  const { body } = await api('GET', `${conversationUrl}/llm-tools`);
  const description = body.tools.find((t) => t.name === 'page_call').description;
  assert.match(description, /- notes\.add — /);
  assert.doesNotMatch(description, /notes\.clear/);
  const mcp = await mcpSession();
  const listed = await mcp.request('tools/list');
  assert.deepEqual(listed.tools.map((t) => t.name).sort(), ['notes__add', 'notes__read', 'report__slow']);

  const added = await callTool('notes.add', { text: 'from the agent' });
  assert.deepEqual(added.outcome, { status: 'ok', data: { count: 1 } });
  const gone = await callTool('notes.clear');
  assert.equal(gone.outcome.status, 'refused');
  assert.ok(['stale', 'unknown_tool'].includes(gone.outcome.code), JSON.stringify(gone.outcome));
});

test('a reload is a new page load: a new clientId gets the calls', { timeout: TEST_TIMEOUT_MS }, async () => {
  const reloaded = await openTestPage();
  assert.notEqual(reloaded, clientId);
  await toolsAre(reloaded, ['notes.clear', 'notes.read', 'report.slow']);
  const read = await callTool('notes.read');
  assert.equal(read.clientId, reloaded);
  assert.deepEqual(read.outcome.data.notes, ['first note', 'second note']);
});

test('the demo with ?transport=webmcp runs its tools through WebMCP and /v1/webmcp.js', { timeout: TEST_TIMEOUT_MS }, async () => {
  const demoConversation = `wd-${randomUUID()}`;
  const demoUrl = `${apiBase}/users/${user}/conversations/${demoConversation}`;
  const demo = await browser.newPage();
  demo.setDefaultTimeout(WAIT_MS);
  demo.on('pageerror', (err) => pageProblems.push(`demo pageerror: ${err.message}`));
  try {
    await demo.goto(`${BASE_URL}/demo?user=${user}&conversation=${demoConversation}&transport=webmcp`, { timeout: WAIT_MS });
    await demo.waitForFunction(() => document.getElementById('status')?.dataset.state === 'connected', null, { timeout: WAIT_MS });
    assert.equal(await demo.$eval('#status', (el) => el.dataset.transport), 'webmcp');
    const demoClient = await demo.$eval('#client-id', (el) => el.textContent);
    const state = await eventually('the WebMCP demo manifest', async () => {
      const { status, body } = await api('GET', demoUrl);
      return status === 200 && body.clientId === demoClient && body.tools.length === 5 ? body : null;
    });
    assert.deepEqual(state.tools.find((t) => t.name === 'todo.list').hints, { readOnly: true, untrustedContent: true });
    const { status, body } = await api('POST', `${demoUrl}/calls`, { tool: 'todo.add', input: { text: 'Over WebMCP' }, timeoutMs: 10000 });
    assert.equal(status, 200, JSON.stringify(body));
    assert.deepEqual(body.outcome, { status: 'ok', data: { id: 1, text: 'Over WebMCP', count: 1 } });
    await demo.waitForFunction(
      () => [...document.querySelectorAll('#todo-list li')].some((li) => li.textContent === 'Over WebMCP'), null, { timeout: WAIT_MS });
    const wrong = await api('POST', `${demoUrl}/calls`, { tool: 'todo.add', input: { text: 42 }, timeoutMs: 10000 });
    assert.deepEqual(wrong.body.outcome, { status: 'error', message: 'Tool failed' });
  } finally {
    await demo.close();
  }
});

test('with Chromium\'s native WebMCP (--enable-features=WebMCP) the same page works without the polyfill', { timeout: TEST_TIMEOUT_MS }, async () => {
  const native = await launch(['--enable-features=WebMCP']);
  try {
    const tab = await testTab(native, 'native');
    const nativeClient = await openTestPage(tab);
    assert.equal(await tab.evaluate(() => document.modelContext.__isWebMCPPolyfill === true), false, 'the native context');
    await toolsAre(nativeClient, ['notes.clear', 'notes.read', 'report.slow']);
    const read = await callTool('notes.read');
    assert.equal(read.clientId, nativeClient);
    assert.deepEqual(read.outcome.data.notes, ['first note', 'second note']);
    await tab.evaluate(() => window.testPage.swap());
    await toolsAre(nativeClient, ['notes.add', 'notes.read', 'report.slow']);
    const added = await callTool('notes.add', { text: 'native' });
    assert.deepEqual(added.outcome, { status: 'ok', data: { count: 3 } });
  } finally {
    await native.close();
  }
});
