// console.test.mjs: the operator's console (GET /admin/console) in headless Chromium, against two
// gateway nodes sharing one Redis. The console is opened on node 1's admin listener; the tenant
// it creates gets a page on node 2 and calls through node 1. Every wait has a deadline.
//
//   ADMIN_URL=http://127.0.0.1:A ADMIN_KEY=<admin key> NODE1_URL=http://127.0.0.1:P1 \
//   NODE2_URL=http://127.0.0.1:P2 [SCREENSHOT_DIR=docs/img/console] node --test console.test.mjs
// Needs playwright-core (npm install in this folder) and Debian's chromium at /usr/bin/chromium.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

const trim = (u) => (u ?? '').replace(/\/+$/, '');
const ADMIN_URL = trim(process.env.ADMIN_URL);
const ADMIN_KEY = process.env.ADMIN_KEY ?? '';
const NODE1_URL = trim(process.env.NODE1_URL);
const NODE2_URL = trim(process.env.NODE2_URL);
const SCREENSHOT_DIR = process.env.SCREENSHOT_DIR;
const WAIT_MS = 15000; // every wait is bounded by this
const TEST_TIMEOUT_MS = 60000;

const tenant = `console-${randomUUID().slice(0, 8)}`;
const user = 'u1';
const conversation = 'c1';
const clientId = randomUUID();

let browser;
let page; // the console
let pageTab; // a page of the tenant, on node 2's origin, in a browser of its own (a visitor's)
const secrets = {};
const pageProblems = [];

// ---------------------------------------------------------------- helpers

async function http(method, url, key, body) {
  const res = await fetch(url, {
    method,
    headers: {
      Authorization: `Bearer ${key}`,
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

const agent = (base, key, method, path, body) => http(method, `${base}/v1/tenants/${tenant}${path}`, key, body);

/** Polls fn until it returns a truthy value, for at most WAIT_MS. */
async function eventually(what, fn) {
  const deadline = Date.now() + WAIT_MS;
  let last;
  for (;;) {
    try {
      const value = await fn();
      if (value) return value;
      last = undefined;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function shot(name) {
  if (SCREENSHOT_DIR) await page.screenshot({ path: `${SCREENSHOT_DIR}/${name}.png`, fullPage: false });
}

const status = () => page.locator('#status');

async function view(name) {
  await page.getByRole('button', { name, exact: true }).click();
}

// ---------------------------------------------------------------- lifecycle

before(async () => {
  for (const [k, v] of Object.entries({ ADMIN_URL, ADMIN_KEY, NODE1_URL, NODE2_URL })) assert.ok(v, `set ${k}`);
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    timeout: WAIT_MS,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'],
  });
  const context = await browser.newContext({ viewport: { width: 1366, height: 860 } });
  page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  page.on('console', (msg) => msg.type() === 'error' && pageProblems.push(`console: ${msg.text()}`));
  page.on('pageerror', (err) => pageProblems.push(`pageerror: ${err.message}`));
  // Not a second tab beside the console: Chromium throttles a background tab's animation frames
  // to one or two a second, and every click waits for two of them (the element must be stable).
  pageTab = await (await browser.newContext()).newPage();
  pageTab.setDefaultTimeout(WAIT_MS);
});

after(async () => {
  if (pageProblems.length > 0) console.error(`console page problems:\n  ${pageProblems.join('\n  ')}`);
  await browser?.close();
});

// ---------------------------------------------------------------- tests (in order, one console)

test('a missing or wrong admin key is a sign-in error', { timeout: TEST_TIMEOUT_MS }, async () => {
  const res = await page.goto(`${ADMIN_URL}/admin/console`);
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-security-policy'], /default-src 'none'; script-src 'self'/);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'Enter an admin key.' }).waitFor();
  await page.getByLabel('Admin key').fill('tma_this-key-is-not-an-admin-key');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'This admin key was refused (401 unauthorized)' }).waitFor();
  assert.equal(await page.locator('#app').isHidden(), true);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('toolmark.adminKey')), null);
  await shot('sign-in');
});

test('signed in, it creates a tenant and shows its secrets once', { timeout: TEST_TIMEOUT_MS }, async () => {
  await page.getByLabel('Admin key').fill(ADMIN_KEY);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('#app').waitFor({ state: 'visible' });
  assert.equal(await page.evaluate(() => sessionStorage.getItem('toolmark.adminKey')), ADMIN_KEY);

  await page.getByLabel('Id', { exact: true }).fill(tenant);
  await page.locator('#new-origins').fill(NODE2_URL);
  // Webhooks to a port nothing listens on: each event fails, then becomes a dead letter.
  await page.getByLabel('Webhook URL (optional)').fill('http://127.0.0.1:9/hooks');
  await page.getByLabel('Webhooks may go to private addresses').check();
  await page.getByRole('button', { name: 'Create tenant' }).click();
  await page.locator('#secrets').waitFor({ state: 'visible' });
  for (const k of ['apiKeyId', 'apiKey', 'tokenKid', 'tokenSecret', 'webhookSecret']) {
    secrets[k] = await page.locator(`#secret-${k}`).inputValue();
    assert.ok(secrets[k], `${k} shown`);
  }
  assert.match(secrets.apiKey, /^tmk_/);
  await page.getByRole('button', { name: 'Copy API key', exact: true }).waitFor();
  await page.locator('#tenant-table tr').filter({ hasText: tenant }).waitFor();
  await shot('tenants');
  await page.getByRole('button', { name: 'I have stored them' }).click();
  assert.equal(await page.locator('#secret-apiKey').count(), 0, 'the secrets leave the page');
});

test("a page connected with the tenant's secret is counted, and its calls too", { timeout: TEST_TIMEOUT_MS }, async () => {
  // A token minted by node 2 (once it follows the catalog), a page on node 2's origin.
  const token = await eventually('a token from node 2', async () => {
    const r = await agent(NODE2_URL, secrets.apiKey, 'POST', '/tokens', { user, conversation });
    return r.status === 201 ? r.body.token : null;
  });
  await pageTab.goto(`${NODE2_URL}/healthz`);
  await pageTab.evaluate(
    ({ url, clientId }) =>
      new Promise((resolve, reject) => {
        const ws = new WebSocket(url);
        window.closeCode = null;
        ws.onopen = () => {
          ws.send(JSON.stringify({ protocol: 1, type: 'manifest', clientId, rev: 1, tools: [{ name: 'ping', llmName: 'ping', description: 'Answers pong', hints: { readOnly: true } }] }));
          resolve();
        };
        ws.onmessage = (m) => {
          const f = JSON.parse(m.data);
          if (f.type === 'call') ws.send(JSON.stringify({ protocol: 1, type: 'result', clientId, id: f.id, result: { status: 'ok', data: 'pong' } }));
        };
        ws.onclose = (e) => {
          window.closeCode = e.code;
        };
        ws.onerror = () => reject(new Error('the page socket failed'));
      }),
    { url: `${NODE2_URL.replace(/^http/, 'ws')}/v1/tenants/${tenant}/page?token=${token}`, clientId },
  );
  // Node 1's console counts node 2's page (connections are cluster-wide).
  await page.locator('#tenant-connections').filter({ hasText: /^1$/ }).waitFor();
  await page.locator(`[data-connections="${tenant}"]`).filter({ hasText: /^1$/ }).waitFor();

  // Calls through node 1, answered by the page on node 2.
  await eventually('the page is current', async () => {
    const r = await agent(NODE1_URL, secrets.apiKey, 'GET', `/users/${user}/conversations/${conversation}`);
    return r.status === 200 && r.body.clientId === clientId;
  });
  for (let i = 0; i < 5; i++) {
    const r = await agent(NODE1_URL, secrets.apiKey, 'POST', `/users/${user}/conversations/${conversation}/calls`, { tool: 'ping', input: {} });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.outcome.data, 'pong');
  }
  await page.locator('#detail-figures li').filter({ hasText: 'ok 5' }).waitFor();

  await view('Live');
  const row = page.locator('#live-table tr').filter({ hasText: tenant });
  await row.locator(`[data-live-connections="${tenant}"]`).filter({ hasText: /^1$/ }).waitFor();
  // Calls a second over the last 10 s: 5 calls read as 0.5 once their second is over.
  await row.locator('td').nth(4).filter({ hasText: /^0\.5$/ }).waitFor();
  assert.equal(await row.locator('svg.spark polyline').count(), 2, 'two sparklines drawn');
  await shot('live');
  await view('Tenants');
});

test('limits saved with If-Match, the API key rotated and a policy set', { timeout: TEST_TIMEOUT_MS }, async () => {
  await page.getByLabel('Calls a second', { exact: true }).fill('50');
  await page.getByRole('button', { name: 'Save settings' }).click();
  await status().filter({ hasText: 'Settings saved: done.' }).waitFor();
  const stored = await http('GET', `${ADMIN_URL}/admin/v1/tenants/${tenant}`, ADMIN_KEY);
  assert.equal(stored.body.limits.callsPerSecond, 50);

  // Rotation: a new key, then the old one deleted.
  await page.getByRole('button', { name: 'Add API key' }).click();
  await page.locator('#secrets').waitFor({ state: 'visible' });
  const newKey = await page.locator('#secret-apiKey').inputValue();
  const newKeyId = await page.locator('#secret-apiKeyId').inputValue();
  assert.notEqual(newKey, secrets.apiKey);
  secrets.newKey = newKey;
  await page.getByRole('button', { name: 'I have stored them' }).click();
  await page.getByRole('button', { name: `Delete ${secrets.apiKeyId}` }).click();
  await status().filter({ hasText: `API key ${secrets.apiKeyId} deleted: done.` }).waitFor();
  await eventually('the old key refused on node 2', async () => (await agent(NODE2_URL, secrets.apiKey, 'POST', '/tokens', { user, conversation })).status === 401);
  assert.equal((await agent(NODE2_URL, newKey, 'POST', '/tokens', { user, conversation })).status, 201);

  // A policy: calls only; minting tokens is then refused.
  await page.getByLabel(`Policy of ${newKeyId}`).fill('{"scopes":["calls"]}');
  await page.getByRole('button', { name: `Set policy of ${newKeyId}` }).click();
  await status().filter({ hasText: `Policy of ${newKeyId} set: done.` }).waitFor();
  await eventually('the policy applied on node 2', async () => {
    const r = await agent(NODE2_URL, newKey, 'POST', '/tokens', { user, conversation });
    return r.status === 403 && r.body.code === 'scope_denied';
  });
  await shot('tenant');
});

test('the tools its pages presented are pinned from the console, and enforce holds them', { timeout: TEST_TIMEOUT_MS }, async () => {
  const call = () => agent(NODE1_URL, secrets.newKey, 'POST', `/users/${user}/conversations/${conversation}/calls`, { tool: 'ping', input: {} });
  const row = page.locator('#tools-table tr[data-tool="ping"]');
  await row.locator('td').nth(2).filter({ hasText: /^not pinned$/ }).waitFor();
  await page.getByRole('button', { name: /^Pin ping [0-9a-f]{12}$/ }).click();
  await status().filter({ hasText: 'Pinned ping: done.' }).waitFor();
  await row.locator('td').nth(2).filter({ hasText: /^pinned$/ }).waitFor();
  const pins = await http('GET', `${ADMIN_URL}/admin/v1/tenants/${tenant}/tools`, ADMIN_KEY);
  assert.equal(pins.body.mode, 'off');
  assert.deepEqual(pins.body.tools.map((p) => p.name), ['ping']);
  assert.match(pins.body.tools[0].digest, /^sha256:[0-9a-f]{64}$/);

  // Enforce: the console says what it would hide before it is set.
  await page.locator('#pins-mode').selectOption('enforce');
  await page.locator('#pins-mode-effect').filter({ hasText: '0 of the 1 presented would be hidden' }).waitFor();
  await page.getByRole('button', { name: 'Set pins mode' }).click();
  await status().filter({ hasText: 'Pins mode enforce: done.' }).waitFor();
  const pinned = await call();
  assert.equal(pinned.status, 200, JSON.stringify(pinned.body));
  await shot('tools');

  // Unpinned under enforce: the page's tool is refused on every node, and nothing reaches it.
  await page.getByRole('button', { name: /^Unpin ping [0-9a-f]{12}$/ }).click();
  await status().filter({ hasText: 'Unpinned ping: done.' }).waitFor();
  await eventually('ping refused once unpinned', async () => {
    const r = await call();
    return r.status === 403 && r.body.code === 'tool_not_pinned';
  });
});

test('the audit log and the event tail follow live', { timeout: TEST_TIMEOUT_MS }, async () => {
  await view('Audit log');
  const audit = page.locator('#audit-log li');
  await audit.filter({ hasText: 'tenant.created' }).filter({ hasText: tenant }).waitFor();
  await audit.filter({ hasText: 'tenant.key_policy' }).filter({ hasText: tenant }).waitFor();
  await shot('audit');
  // The record of one tenant (GET /admin/v1/audit?tenant=), newest first, then live.
  const before = await audit.count();
  await page.locator('#audit-tenant').fill(tenant);
  await page.getByRole('button', { name: 'Read', exact: true }).click();
  await page.locator('#audit-count').filter({ hasText: `of ${tenant} kept` }).waitFor();
  const entries = await audit.allTextContents();
  assert.ok(entries.length > 0 && entries.length <= before, `${entries.length} of ${before}`);
  for (const e of entries) assert.ok(e.includes(tenant), `only ${tenant}'s changes: ${e}`);
  assert.match(entries[entries.length - 1], /tenant\.created/, 'the oldest kept is its creation');

  await view('Event tail');
  await page.locator('#events-tenant').selectOption(tenant);
  await page.getByRole('button', { name: 'Follow', exact: true }).click();
  const events = page.locator('#event-log li');
  await events.filter({ hasText: 'page.manifest' }).filter({ hasText: clientId }).first().waitFor();
  await shot('events');
});

test('a dead-lettered webhook is shown with its last error, and retried', { timeout: TEST_TIMEOUT_MS }, async () => {
  await view('Dead letters');
  await page.locator('#dead-tenant').selectOption(tenant);
  const retry = page.getByRole('button', { name: /^Retry / }).first();
  await eventually('a dead letter listed', async () => {
    await page.getByRole('button', { name: 'Show', exact: true }).click();
    return (await retry.count()) > 0;
  });
  const row = page.locator('#dead-table tr').filter({ has: retry });
  assert.match(await row.textContent(), /page\.manifest|call\.result/);
  assert.ok((await row.locator('td').nth(3).textContent()).trim().length > 0, 'the last error is shown');
  await shot('dead-letters');
  await retry.click();
  await status().filter({ hasText: /is back in its conversation's queue/ }).waitFor();
  await view('Audit log');
  await page.locator('#audit-log li').filter({ hasText: 'tenant.webhook_retried' }).filter({ hasText: tenant }).waitFor();
});

test('deleting the tenant needs its id typed, and closes its page', { timeout: TEST_TIMEOUT_MS }, async () => {
  await view('Tenants');
  // Opened again: the delete is sent with the version the console read (If-Match), and the
  // tests before changed the tenant.
  await page.getByRole('button', { name: `Open ${tenant}`, exact: true }).click();
  const remove = page.getByRole('button', { name: `Delete tenant ${tenant}` });
  assert.equal(await remove.isDisabled(), true);
  await page.getByLabel(`Type ${tenant} to confirm`).fill('not-the-id');
  assert.equal(await remove.isDisabled(), true);
  await page.getByLabel(`Type ${tenant} to confirm`).fill(tenant);
  assert.equal(await remove.isEnabled(), true);
  await remove.click();
  // Either answer: a refusal fails here with its reason rather than a timeout.
  const answered = status().filter({ hasText: new RegExp(`Tenant ${tenant} (not )?deleted`) });
  await answered.waitFor();
  const said = await answered.textContent();
  assert.ok(said.includes(`Tenant ${tenant} deleted`), `the console said: ${said}`);
  await page.locator('#tenant-table tr').filter({ hasText: tenant }).waitFor({ state: 'detached' });
  await pageTab.waitForFunction(() => window.closeCode === 4401, null, { timeout: WAIT_MS });
  assert.equal((await http('GET', `${ADMIN_URL}/admin/v1/tenants/${tenant}`, ADMIN_KEY)).status, 404);

  await page.getByRole('button', { name: 'Sign out', exact: true }).click();
  await page.locator('#sign-in').waitFor({ state: 'visible' });
  assert.equal(await page.evaluate(() => sessionStorage.getItem('toolmark.adminKey')), null);
});
