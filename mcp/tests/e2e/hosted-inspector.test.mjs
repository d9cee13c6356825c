// hosted-inspector.test.mjs: the MCP Inspector's CLI mode (a real, one-shot MCP client over
// Streamable HTTP) against the hosted MCP endpoint of a dev-mode gateway, with a simulated page
// on the gateway's page socket: the listing, a call, and the refusal of a page token.
//
//   BASE_URL=http://127.0.0.1:8080 DEV_KEY=tmk_dev_… node --test hosted-inspector.test.mjs

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { promisify } from 'node:util';

import { openAndServe, tool } from './page-sim.mjs';

const run = promisify(execFile);
const BASE = process.env.BASE_URL ?? '';
const KEY = process.env.DEV_KEY ?? '';
const here = (file) => fileURLToPath(new URL(file, import.meta.url));
const INSPECTOR = here('./node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js');

async function mint(user, conversation, scope) {
  assert.ok(BASE && KEY, 'set BASE_URL and DEV_KEY to a dev-mode gateway (scripts/mcp-e2e.sh does)');
  const response = await fetch(`${BASE}/v1/tenants/dev/tokens`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(scope ? { user, conversation, scope } : { user, conversation }),
  });
  assert.equal(response.status, 201);
  return response.json();
}

async function inspector(token, ...args) {
  const { stdout } = await run(
    process.execPath,
    [INSPECTOR, '--cli', `${BASE}/v1/tenants/dev/mcp`, '--transport', 'http',
      '--header', `Authorization: Bearer ${token}`, ...args],
    { timeout: 60000 },
  );
  return JSON.parse(stdout);
}

test('the inspector lists and calls the tools of the page a user has open', { timeout: 90000 }, async () => {
  const page = await openAndServe({
    url: (await mint('u-insp', 'c-insp')).url,
    origin: BASE,
    tools: [tool('todo.add', (input) => ({ status: 'ok', data: { text: input.text, count: 1 } }))],
  });
  try {
    const { token, url } = await mint('u-insp', 'c-insp', 'mcp');
    assert.equal(url, `${BASE}/v1/tenants/dev/mcp`);
    // The page's manifest reaches the conversation's state a moment after the socket opens.
    let listing;
    for (let i = 0; i < 50; i += 1) {
      listing = await inspector(token, '--method', 'tools/list');
      if (listing.tools.length > 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.deepEqual(listing.tools.map((t) => t.name), ['todo__add']);
    assert.deepEqual(listing.tools[0].inputSchema, { type: 'object', properties: { text: { type: 'string' } } });
    const result = await inspector(token, '--method', 'tools/call', '--tool-name', 'todo__add', '--tool-arg', 'text=hello');
    assert.equal(result.isError, false);
    assert.deepEqual(result.structuredContent, { status: 'ok', data: { text: 'hello', count: 1 } });
  } finally {
    page.ws.close();
  }
});

test('a page token does not open the endpoint', { timeout: 90000 }, async () => {
  const { token } = await mint('u-insp', 'c-insp');
  await assert.rejects(inspector(token, '--method', 'tools/list'));
});
