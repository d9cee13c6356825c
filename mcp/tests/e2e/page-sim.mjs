// page-sim.mjs: a simulated app page for the Node end-to-end tests. Pairs with toolmark-mcp over
// a real WebSocket (sending the Origin header a browser would) and serves tools as a protocol v1
// bridge with caller mcp: describes are answered from the definitions, calls by `run`.

import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';

/** A tool definition: summary fields plus inputSchema and run(input) -> ToolResult. */
export function tool(name, run, hints = {}) {
  return {
    name,
    llmName: name.replaceAll('.', '__'),
    title: `Title of ${name}`,
    description: `Description of ${name}.`,
    hints,
    inputSchema: { type: 'object', properties: { text: { type: 'string' } } },
    run,
  };
}

/** Pairs with `code` on `port` and serves `tools`; resolves once every describe is answered. */
export function pairAndServe({ port, code, origin, tools }) {
  const clientId = randomUUID();
  const ws = new WebSocket(`ws://127.0.0.1:${port}`, { origin });
  const summary = ({ run, inputSchema, ...rest }) => rest;
  const send = (message) => ws.send(JSON.stringify({ protocol: 1, clientId, ...message }));
  return new Promise((resolve, reject) => {
    let described = 0;
    ws.on('open', () => ws.send(JSON.stringify({ type: 'pair', code })));
    ws.on('error', reject);
    ws.on('close', (closeCode) => reject(new Error(`page socket closed with ${closeCode}`)));
    ws.on('message', (raw) => {
      const message = JSON.parse(raw.toString());
      if (message.type === 'paired') {
        send({ type: 'manifest', rev: 1, tools: tools.map(summary) });
        return;
      }
      if (message.clientId !== clientId) return;
      const definition = tools.find((t) => t.name === message.tool);
      if (message.type === 'describe') {
        const { run, ...entry } = definition;
        send({ type: 'result', id: message.id, result: { status: 'ok', data: entry } });
        described += 1;
        if (described === tools.length) resolve({ ws, clientId });
      } else if (message.type === 'call') {
        send({ type: 'result', id: message.id, result: definition.run(message.input) });
      }
    });
  });
}

/** A page of the gateway: opens the page socket at `url` (from POST /tokens) and serves `tools`
 * (describes from the definitions, calls by `run`); resolves once the manifest is sent. */
export function openAndServe({ url, origin, tools }) {
  const clientId = randomUUID();
  const ws = new WebSocket(url, { origin });
  const summary = ({ run, inputSchema, ...rest }) => rest;
  const send = (message) => ws.send(JSON.stringify({ protocol: 1, clientId, ...message }));
  return new Promise((resolve, reject) => {
    ws.on('open', () => {
      send({ type: 'manifest', rev: 1, tools: tools.map(summary) });
      resolve({ ws, clientId });
    });
    ws.on('error', reject);
    ws.on('message', (raw) => {
      const message = JSON.parse(raw.toString());
      if (message.clientId !== clientId) return;
      const definition = tools.find((t) => t.name === message.tool);
      if (message.type === 'describe') {
        const { run, ...entry } = definition;
        send({ type: 'result', id: message.id, result: { status: 'ok', data: entry } });
      } else if (message.type === 'call') {
        send({ type: 'result', id: message.id, result: definition.run(message.input) });
      }
    });
  });
}
