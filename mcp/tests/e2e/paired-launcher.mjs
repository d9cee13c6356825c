// paired-launcher.mjs: the "server command" the MCP Inspector CLI launches in the paired test.
// It starts the real toolmark-mcp with stdout going straight to the inspector, pairs a simulated
// page with the printed code, and only then lets the inspector's requests through to stdin, so
// that a one-shot CLI client finds the page's tools. Usage: node paired-launcher.mjs <binary> <origin>

import { spawn } from 'node:child_process';
import { pairAndServe, tool } from './page-sim.mjs';

const [binary, origin] = process.argv.slice(2);
const child = spawn(binary, ['--allow-origin', origin, '--port', '0'], { stdio: ['pipe', 'inherit', 'pipe'] });
const held = [];
let released = false;
process.stdin.on('data', (chunk) => (released ? child.stdin.write(chunk) : held.push(chunk)));
process.stdin.on('end', () => (released ? child.stdin.end() : held.push(null)));
child.on('exit', (code) => process.exit(code ?? 1));

let port;
let buffer = '';
child.stderr.on('data', async (chunk) => {
  process.stderr.write(chunk);
  buffer += chunk.toString('utf8');
  port ??= buffer.match(/pairing server on ws:\/\/127\.0\.0\.1:(\d+)/)?.[1];
  const code = buffer.match(/Toolmark pairing code: (\S{4}-\S{4})/)?.[1];
  if (!port || !code || buffer.includes('\u0000paired')) return;
  buffer += '\u0000paired';
  let count = 0;
  await pairAndServe({
    port: Number(port),
    code,
    origin,
    tools: [tool('todo.add', ({ text }) => ({ status: 'ok', data: { text, count: ++count } }))],
  });
  await new Promise((resolve) => setTimeout(resolve, 200)); // the CLI installs the described tools
  released = true;
  for (const chunk of held) chunk === null ? child.stdin.end() : child.stdin.write(chunk);
});
