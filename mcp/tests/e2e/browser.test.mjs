// browser.test.mjs: the demo page pairs with toolmark-mcp through its "Pair with desktop MCP"
// panel in headless Chromium, an MCP client (the official TypeScript SDK over stdio) calls the
// page's tools, and a superseded page can no longer run anything.
//
// Run against a started gateway in dev mode:
//   BASE_URL=http://127.0.0.1:PORT TOOLMARK_MCP=target/debug/toolmark-mcp node --test browser.test.mjs
// Needs the packages of package.json (npm install in this folder) and Debian's chromium.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

import { WAIT_MS, eventually, startMcp } from './mcp-client.mjs';

const BASE_URL = (process.env.BASE_URL ?? '').replace(/\/+$/, '');
const TEST_TIMEOUT_MS = 90000;
const TAKEN_OVER = 'Another page took over the MCP connection before the result arrived.';

let browser;
let mcp;
const problems = [];

async function openDemo(user) {
  const page = await browser.newPage();
  page.setDefaultTimeout(WAIT_MS);
  page.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
  await page.goto(`${BASE_URL}/demo?user=${user}&mcpPort=${mcp.port}`);
  // The panel shows its port once the page's session has loaded, which may come after the
  // load event (on a busy machine it did): wait for ours, up to WAIT_MS, then check it.
  await page
    .waitForFunction((port) => document.getElementById('mcp-port')?.textContent === port, String(mcp.port))
    .catch(() => {});
  assert.equal(await page.textContent('#mcp-port'), String(mcp.port));
  return page;
}

async function pairThroughPanel(page, code) {
  await page.fill('#mcp-code', code.toLowerCase());
  await page.click('#mcp-form button[type="submit"]');
  await page.waitForFunction(() => document.getElementById('mcp-status')?.dataset.state === 'paired');
}

const stateOf = (page) => page.$eval('#mcp-status', (el) => el.dataset.state);
const todoTexts = (page) => page.$$eval('#todo-list li', (items) => items.map((li) => li.textContent));

before(async () => {
  assert.ok(BASE_URL, 'set BASE_URL to the gateway, e.g. http://127.0.0.1:8080');
  mcp = await startMcp(new URL(BASE_URL).origin);
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    timeout: WAIT_MS,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'],
  });
});

after(async () => {
  if (problems.length > 0) console.error(`page problems:\n  ${problems.join('\n  ')}`);
  await browser?.close();
  await mcp?.close();
});

test('the panel pairs, an MCP client calls todo.add and the page shows the item', { timeout: TEST_TIMEOUT_MS }, async () => {
  const page = await openDemo('mcp-a');
  assert.deepEqual(await mcp.toolNames(), ['toolmark_pairing']);
  const pairing = await mcp.client.callTool({ name: 'toolmark_pairing', arguments: {} });
  const code = await mcp.code(0);
  assert.ok(pairing.content[0].text.includes(`enter code ${code} (expires in 5 minutes)`), pairing.content[0].text);

  await pairThroughPanel(page, code);
  await eventually('list_changed', () => mcp.listChanged() > 0);
  await eventually('the page tools', async () => (await mcp.toolNames()).includes('todo__add'));
  assert.deepEqual(await mcp.toolNames(), ['signup__fill', 'signup__submit', 'todo__add', 'todo__clear', 'todo__list']);
  assert.ok(await page.evaluate((port) => sessionStorage.getItem(`toolmark:mcp:${port}`)?.length === 64, mcp.port));

  const result = await mcp.client.callTool({ name: 'todo__add', arguments: { text: 'Call the plumber' } });
  assert.equal(result.isError, false, JSON.stringify(result));
  assert.equal(result.structuredContent.status, 'ok');
  assert.equal(result.structuredContent.data.text, 'Call the plumber');
  await page.waitForFunction(() => [...document.querySelectorAll('#todo-list li')].some((li) => li.textContent === 'Call the plumber'));

  // After a reload the page resumes with its token, without a new code.
  const before = mcp.listChanged();
  await page.reload();
  await page.waitForFunction(() => document.getElementById('mcp-status')?.dataset.state === 'paired');
  const again = await eventually('a call after the reload', async () => {
    const r = await mcp.client.callTool({ name: 'todo__add', arguments: { text: 'After reload' } });
    return r.structuredContent?.status === 'ok' ? r : null;
  });
  assert.equal(again.structuredContent.data.count, 1, 'a new page load starts with an empty list');
  assert.deepEqual(await todoTexts(page), ['After reload']);
  assert.equal(mcp.listChanged(), before, 'a reload with the same tools is invisible to the client');
  await page.close();
});

test('a superseded page withdraws its inline confirmation and an approval there runs nothing', { timeout: TEST_TIMEOUT_MS }, async () => {
  const old = await openDemo('mcp-old');
  await pairThroughPanel(old, mcp.codes().at(-1));
  await eventually('the page tools', async () => (await mcp.toolNames()).includes('signup__submit'));
  const fill = await mcp.client.callTool({
    name: 'signup__fill',
    arguments: { name: 'Ada Lovelace', email: 'ada@example.com', password: 'correct horse battery' },
  });
  assert.equal(fill.structuredContent.status, 'ok', JSON.stringify(fill));
  assert.ok(fill.content[0].text.startsWith('[untrusted page content]'));

  // A consequential call waits for the human in the page (inline confirmation for caller mcp).
  const submit = mcp.client.callTool({ name: 'signup__submit', arguments: {} });
  const item = old.locator('.pending-item[data-caller="mcp"]');
  await item.waitFor({ state: 'visible' });
  assert.match(await item.textContent(), /Submit the sign-up form for ada@example\.com/);
  const staleApprove = await item.locator('.approve').elementHandle();

  // Another page pairs with the fresh code: the old one is superseded.
  const next = await openDemo('mcp-new');
  await pairThroughPanel(next, mcp.codes().at(-1));
  const outcome = await submit;
  assert.equal(outcome.isError, true);
  assert.equal(outcome.content[0].text, TAKEN_OVER);
  await old.waitForFunction(() => document.getElementById('mcp-status')?.dataset.state === 'superseded');
  assert.equal(await old.locator('.pending-item').count(), 0, 'the confirmation is withdrawn');

  // The user of the old page approves the old confirmation anyway: the tool must not run.
  await staleApprove.evaluate((button) => button.click());
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.notEqual(await old.textContent('#signup-result'), 'Submitted');
  assert.equal(await stateOf(old), 'superseded');

  // Calls now reach the new page only.
  await eventually('the new page tools', async () => {
    const r = await mcp.client.callTool({ name: 'todo__add', arguments: { text: 'On the new page' } });
    return r.structuredContent?.status === 'ok';
  });
  await next.waitForFunction(() => [...document.querySelectorAll('#todo-list li')].some((li) => li.textContent === 'On the new page'));
  assert.deepEqual(await todoTexts(old), []);
});
