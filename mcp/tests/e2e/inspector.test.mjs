// inspector.test.mjs: the MCP Inspector's CLI mode (a real, one-shot MCP client) against the
// real toolmark-mcp binary: the unpaired listing, the pairing text, and a page tool called after
// a simulated page paired.
//
//   TOOLMARK_MCP=target/debug/toolmark-mcp node --test inspector.test.mjs

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { promisify } from 'node:util';

const run = promisify(execFile);
const BINARY = process.env.TOOLMARK_MCP ?? '';
const ORIGIN = 'http://localhost:5173';
const here = (file) => fileURLToPath(new URL(file, import.meta.url));
const INSPECTOR = here('./node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js');

async function inspector(command, ...args) {
  assert.ok(BINARY, 'set TOOLMARK_MCP to the toolmark-mcp binary (scripts/mcp-e2e.sh does)');
  const { stdout } = await run(process.execPath, [INSPECTOR, '--cli', ...command, ...args], { timeout: 60000 });
  return JSON.parse(stdout);
}

const unpaired = [BINARY, '--allow-origin', ORIGIN, '--port', '0'];

test('tools/list shows toolmark_pairing alone', { timeout: 90000 }, async () => {
  const listing = await inspector(unpaired, '--method', 'tools/list');
  assert.deepEqual(listing.tools.map((t) => t.name), ['toolmark_pairing']);
  assert.equal(listing.tools[0].annotations.readOnlyHint, true);
});

test('toolmark_pairing says what the user must do', { timeout: 90000 }, async () => {
  const result = await inspector(unpaired, '--method', 'tools/call', '--tool-name', 'toolmark_pairing');
  assert.match(
    result.content[0].text,
    /^Open the app, choose "Pair with desktop MCP", and enter code [0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4} \(expires in 5 minutes\)\.$/,
  );
});

test('a paired page serves its tools to the inspector', { timeout: 90000 }, async () => {
  const paired = [process.execPath, here('./paired-launcher.mjs'), BINARY, ORIGIN];
  const listing = await inspector(paired, '--method', 'tools/list');
  assert.deepEqual(listing.tools.map((t) => t.name), ['todo__add']);
  const result = await inspector(paired, '--method', 'tools/call', '--tool-name', 'todo__add', '--tool-arg', 'text=hello');
  assert.equal(result.isError, false);
  assert.deepEqual(result.structuredContent, { status: 'ok', data: { text: 'hello', count: 1 } });
});
