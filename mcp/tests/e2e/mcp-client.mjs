// mcp-client.mjs: starts the real toolmark-mcp binary under the official TypeScript MCP client
// (stdio) and reads its stderr lines (the pairing port and codes) for the tests.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

export const WAIT_MS = 15000;

/** Polls fn until it returns a truthy value or WAIT_MS passes. */
export async function eventually(what, fn) {
  const deadline = Date.now() + WAIT_MS;
  let last;
  for (;;) {
    try {
      const value = await fn();
      if (value) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Starts toolmark-mcp (TOOLMARK_MCP) with --port 0 and connects an MCP client to it. */
export async function startMcp(allowOrigin) {
  const binary = process.env.TOOLMARK_MCP;
  if (!binary) throw new Error('set TOOLMARK_MCP to the toolmark-mcp binary (scripts/mcp-e2e.sh does)');
  const transport = new StdioClientTransport({
    command: binary,
    args: ['--allow-origin', allowOrigin, '--port', '0'],
    stderr: 'pipe',
  });
  const lines = [];
  let partial = '';
  transport.stderr.on('data', (chunk) => {
    partial += chunk.toString('utf8');
    const parts = partial.split('\n');
    partial = parts.pop();
    lines.push(...parts);
  });
  const client = new Client({ name: 'toolmark-e2e', version: '1.0.0' });
  let listChanged = 0;
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    listChanged += 1;
  });
  await client.connect(transport);
  const port = Number(
    (await eventually('the pairing server line', () =>
      lines.map((l) => l.match(/^Toolmark MCP: pairing server on ws:\/\/127\.0\.0\.1:(\d+)$/)).find(Boolean)))[1],
  );
  const codes = () => lines.map((l) => l.match(/^Toolmark pairing code: (\S{4}-\S{4}) \(expires in 5 minutes\)$/)?.[1]).filter(Boolean);
  return {
    client,
    port,
    lines,
    codes,
    listChanged: () => listChanged,
    /** Waits for the n-th printed code (0-based). */
    code: (n) => eventually(`pairing code #${n}`, () => codes()[n]),
    toolNames: async () => (await client.listTools()).tools.map((t) => t.name).sort(),
    close: () => client.close(),
  };
}
