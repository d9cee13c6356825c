// demo.test.mjs: end-to-end test of the gateway's demo page in headless Chromium. The page connects
// over the page WebSocket; this test plays the agent through the HTTP API (Bearer API key), checks
// the DOM, follows the SSE event stream and approves a deferred confirmation by clicking in the page.
//
// Run against a started gateway (dev mode):
//   BASE_URL=http://127.0.0.1:PORT API_KEY=<dev key> TENANT=dev [SCREENSHOT=out.png] node --test demo.test.mjs
// Needs playwright-core (npm install in this folder) and Debian's chromium at /usr/bin/chromium.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

const BASE_URL = (process.env.BASE_URL ?? '').replace(/\/+$/, '');
const API_KEY = process.env.API_KEY ?? '';
const TENANT = process.env.TENANT ?? 'dev';
const WAIT_MS = 15000; // every wait is bounded by this
const TEST_TIMEOUT_MS = 60000;

const user = 'browser';
const conversation = `c-${randomUUID()}`;
const apiBase = `${BASE_URL}/v1/tenants/${TENANT}`;
const conversationUrl = `${apiBase}/users/${user}/conversations/${conversation}`;

let browser;
let page;
let events; // the SSE subscription, once open
const pageProblems = []; // console errors and uncaught page errors, shown when a test fails

// ---------------------------------------------------------------- helpers

/** Calls the agent API; returns {status, body}. */
async function api(method, url, body) {
  const res = await fetch(url, {
    method,
    headers: {
      Authorization: `Bearer ${API_KEY}`,
      Accept: 'application/json',
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(WAIT_MS),
  });
  const text = await res.text();
  let parsed;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed };
}

/** Calls a page tool through the agent API and returns the 200 answer {id, clientId, outcome}. */
async function callTool(tool, input) {
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
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${WAIT_MS} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Opens the conversation's Server-Sent Events stream with fetch. Resolves once the response
 * headers arrived; waitFor(predicate) then resolves with the first matching event body
 * ({type, id, timestamp, data}), seen before or after the call.
 */
async function subscribe() {
  const controller = new AbortController();
  const query = new URLSearchParams({ user, conversation });
  const headersTimer = setTimeout(() => controller.abort(new Error('no SSE response headers in time')), WAIT_MS);
  const res = await fetch(`${apiBase}/events?${query}`, {
    headers: { Authorization: `Bearer ${API_KEY}`, Accept: 'text/event-stream' },
    signal: controller.signal,
  });
  clearTimeout(headersTimer);
  if (res.status !== 200) assert.fail(`GET events: ${res.status} ${await res.text().catch(() => '')}`);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);

  const received = [];
  const waiters = new Set();
  const offer = (event) => {
    received.push(event);
    for (const waiter of waiters) if (waiter.predicate(event)) waiter.resolve(event);
  };

  // A minimal SSE reader: events are separated by a blank line; data lines are joined by "\n".
  (async () => {
    let buffer = '';
    const decoder = new TextDecoder();
    for await (const chunk of res.body) {
      buffer += decoder.decode(chunk, { stream: true }).replace(/\r\n?/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block
          .split('\n')
          .filter((line) => line.startsWith('data:'))
          .map((line) => line.slice(5).replace(/^ /, ''))
          .join('\n');
        if (data) offer(JSON.parse(data));
      }
    }
  })().catch(() => {}); // ends when the stream is aborted in after()

  return {
    close: () => controller.abort(),
    waitFor(what, predicate) {
      const seen = received.find(predicate);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const waiter = { predicate, resolve };
        waiters.add(waiter);
        setTimeout(() => {
          waiters.delete(waiter);
          reject(new Error(`no ${what} event within ${WAIT_MS} ms; saw ${JSON.stringify(received.map((e) => e.type))}`));
        }, WAIT_MS).unref();
      });
    },
  };
}

const textOf = (selector) => page.$eval(selector, (el) => el.textContent);

// ---------------------------------------------------------------- lifecycle

before(async () => {
  assert.ok(BASE_URL, 'set BASE_URL to the gateway, e.g. http://127.0.0.1:8080');
  assert.ok(API_KEY, 'set API_KEY to the dev tenant API key printed by toolmark-gateway at start');
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    timeout: WAIT_MS,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-quic',
      '--no-first-run',
      '--disable-sync',
    ],
  });
  page = await browser.newPage();
  page.setDefaultTimeout(WAIT_MS);
  page.on('console', (msg) => msg.type() === 'error' && pageProblems.push(`console: ${msg.text()}`));
  page.on('pageerror', (err) => pageProblems.push(`pageerror: ${err.message}`));
});

after(async () => {
  events?.close();
  if (page && process.env.SCREENSHOT) {
    await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true }).catch((err) => {
      console.error(`screenshot failed: ${err.message}`);
    });
  }
  if (pageProblems.length > 0) console.error(`page problems:\n  ${pageProblems.join('\n  ')}`);
  await browser?.close();
});

// ---------------------------------------------------------------- tests (run in order, one page)

test('the demo page connects and publishes its tools', { timeout: TEST_TIMEOUT_MS }, async () => {
  await page.goto(`${BASE_URL}/demo?user=${user}&conversation=${conversation}`, { timeout: WAIT_MS });
  await page.waitForFunction(() => document.getElementById('status')?.textContent === 'connected', null, {
    timeout: WAIT_MS,
  });
  const clientId = await textOf('#client-id');
  assert.match(clientId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);

  const state = await eventually('the page manifest', async () => {
    const { status, body } = await api('GET', conversationUrl);
    return status === 200 && body.tools?.length > 0 ? body : null;
  });
  assert.equal(state.clientId, clientId);
  const names = state.tools.map((tool) => tool.name).sort();
  assert.deepEqual(names, ['signup.fill', 'signup.submit', 'todo.add', 'todo.clear', 'todo.list']);
  const submit = state.tools.find((tool) => tool.name === 'signup.submit');
  assert.equal(submit.llmName, 'signup__submit');
  assert.equal(submit.hints.consequential, true);
});

test('todo.add through the agent API shows in the page', { timeout: TEST_TIMEOUT_MS }, async () => {
  const clientId = await textOf('#client-id');
  const first = await callTool('todo.add', { text: 'Buy milk' });
  assert.equal(first.clientId, clientId);
  assert.equal(first.outcome.status, 'ok', JSON.stringify(first.outcome));
  assert.equal(first.outcome.data.text, 'Buy milk');
  assert.equal(first.outcome.data.count, 1);
  assert.notEqual(first.outcome.data.id, undefined);
  const second = await callTool('todo.add', { text: 'Walk the dog' });
  assert.equal(second.outcome.status, 'ok');
  assert.equal(second.outcome.data.count, 2);

  await page.waitForFunction(
    (texts) => {
      const items = [...document.querySelectorAll('#todo-list li')].map((li) => li.textContent);
      return texts.every((text) => items.includes(text));
    },
    ['Buy milk', 'Walk the dog'],
    { timeout: WAIT_MS },
  );

  const rejected = await callTool('todo.add', { text: 42 });
  assert.equal(rejected.outcome.status, 'invalid');
  assert.equal(rejected.outcome.issues[0].path, 'text');
});

test('signup.fill fills the form and redacts the password', { timeout: TEST_TIMEOUT_MS }, async () => {
  const password = 'correct horse battery staple';
  const answer = await callTool('signup.fill', { name: 'Ada Lovelace', email: 'ada@example.com', password });
  assert.equal(answer.outcome.status, 'ok', JSON.stringify(answer.outcome));
  const changes = answer.outcome.data.changes;
  assert.deepEqual(changes.find((c) => c.path === 'password'), { path: 'password', after: '[redacted]' });
  assert.deepEqual(changes.find((c) => c.path === 'email'), { path: 'email', after: 'ada@example.com' });
  assert.ok(!JSON.stringify(answer).includes(password), 'the password must never leave the page');
  assert.equal(await page.inputValue('#signup-email'), 'ada@example.com');
  assert.equal(await page.inputValue('#signup-name'), 'Ada Lovelace');
});

test('signup.submit waits for the user; approving resolves the confirmation', { timeout: TEST_TIMEOUT_MS }, async () => {
  events = await subscribe();

  const answer = await callTool('signup.submit', {});
  const { outcome } = answer;
  assert.equal(outcome.status, 'needs_confirmation', JSON.stringify(outcome));
  assert.equal(typeof outcome.confirmId, 'string');
  assert.ok(outcome.confirmId.length > 0);
  assert.equal(outcome.summary, 'Submit the sign-up form for ada@example.com');
  assert.ok(
    outcome.changes.some((c) => c.path === 'password' && c.after === '[redacted]'),
    `a redacted password change in ${JSON.stringify(outcome.changes)}`,
  );

  const item = page.locator(`.pending-item[data-confirm-id="${outcome.confirmId}"]`);
  await item.waitFor({ state: 'visible', timeout: WAIT_MS });
  assert.match(await item.textContent(), /Submit the sign-up form for ada@example\.com/);
  await item.locator('.approve').click({ timeout: WAIT_MS });

  const resolved = await events.waitFor(
    'confirmation.resolved',
    (e) => e.type === 'confirmation.resolved' && e.data?.confirmId === outcome.confirmId,
  );
  assert.equal(resolved.data.outcome.status, 'ok', JSON.stringify(resolved.data));
  assert.deepEqual(resolved.data.outcome.data, { submitted: true, email: 'ada@example.com' });
  assert.equal(resolved.data.callId, answer.id);
  assert.equal(typeof resolved.id, 'string');

  await page.waitForFunction(() => document.getElementById('signup-result')?.textContent === 'Submitted', null, {
    timeout: WAIT_MS,
  });
  assert.equal(await page.locator('.pending-item').count(), 0);
});

test('with ?transport=echo the page runs over the Pusher protocol and the bridge POST', { timeout: TEST_TIMEOUT_MS }, async () => {
  const echoConversation = `e-${randomUUID()}`;
  const echoUrl = `${apiBase}/users/${user}/conversations/${echoConversation}`;
  const echoPage = await browser.newPage();
  echoPage.setDefaultTimeout(WAIT_MS);
  echoPage.on('pageerror', (err) => pageProblems.push(`echo pageerror: ${err.message}`));
  try {
    await echoPage.goto(`${BASE_URL}/demo?user=${user}&conversation=${echoConversation}&transport=echo`, { timeout: WAIT_MS });
    await echoPage.waitForFunction(() => document.getElementById('status')?.textContent === 'connected', null, {
      timeout: WAIT_MS,
    });
    assert.equal(await echoPage.$eval('#status', (el) => el.dataset.transport), 'echo');
    const clientId = await echoPage.$eval('#client-id', (el) => el.textContent);
    await eventually('the Echo page manifest', async () => {
      const { status, body } = await api('GET', echoUrl);
      return status === 200 && body.clientId === clientId ? body : null;
    });
    const { status, body } = await api('POST', `${echoUrl}/calls`, { tool: 'todo.add', input: { text: 'Over Echo' }, timeoutMs: 10000 });
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.clientId, clientId);
    assert.equal(body.outcome.status, 'ok', JSON.stringify(body.outcome));
    await echoPage.waitForFunction(
      () => [...document.querySelectorAll('#todo-list li')].some((li) => li.textContent === 'Over Echo'),
      null,
      { timeout: WAIT_MS },
    );
  } finally {
    await echoPage.close();
  }
});

test('the agent console shows the conversation\'s hosted MCP URL', { timeout: TEST_TIMEOUT_MS }, async () => {
  const consolePage = await browser.newPage();
  consolePage.setDefaultTimeout(WAIT_MS);
  consolePage.on('pageerror', (err) => pageProblems.push(`console pageerror: ${err.message}`));
  try {
    await consolePage.goto(`${BASE_URL}/demo/agent?user=${user}&conversation=c-mcp`, { timeout: WAIT_MS });
    await consolePage.waitForFunction(() => document.getElementById('session-user')?.textContent !== '–', null, {
      timeout: WAIT_MS,
    });
    await consolePage.click('#mcp-mint');
    await consolePage.waitForFunction(() => document.getElementById('mcp-url')?.textContent !== '–', null, {
      timeout: WAIT_MS,
    });
    const url = await consolePage.$eval('#mcp-url', (el) => el.textContent);
    assert.equal(url, `${BASE_URL}/v1/tenants/dev/mcp`);
    const config = JSON.parse(await consolePage.$eval('#mcp-config', (el) => el.textContent));
    const server = config.mcpServers['toolmark-demo'];
    assert.equal(server.url, url);
    // The token shown opens the endpoint: an initialize answers 200.
    const res = await fetch(url, {
      method: 'POST',
      headers: {
        authorization: server.headers.Authorization,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {
        protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'console-test', version: '1' } } }),
    });
    assert.equal(res.status, 200);
    await res.body?.cancel();
  } finally {
    await consolePage.close();
  }
});
