// webmcp-demo.js: the demo's ?transport=webmcp. The demo's tools are registered through the
// WebMCP API (document.modelContext; where the browser has none, the small in-page stand-in
// below, so the demo works offline with nothing fetched from elsewhere) and put on the gateway
// by the gateway's own GET /v1/webmcp.js. WebMCP has no deferred confirmation: a destructive or
// consequential tool asks the user with the browser's confirm() before it runs.

import { checkSchema } from './bridge.js';

/**
 * A minimal WebMCP modelContext: registerTool(tool, {signal}) (unregistered when the signal
 * aborts), getTools() and a toolchange event. Only what the demo and webmcp.js use.
 */
export function inPageModelContext() {
  const context = new EventTarget();
  const tools = new Map();
  const changed = () => context.dispatchEvent(new Event('toolchange'));
  context.registerTool = async (tool, { signal } = {}) => {
    if (tools.has(tool.name)) throw new DOMException(`Tool already registered: ${tool.name}`, 'InvalidStateError');
    signal?.throwIfAborted();
    tools.set(tool.name, tool);
    signal?.addEventListener('abort', () => tools.get(tool.name) === tool && tools.delete(tool.name) && changed(), { once: true });
    changed();
  };
  context.getTools = async () => [...tools.values()].map(({ name, title, description, inputSchema, annotations }) =>
    ({ name, title, description, inputSchema, annotations }));
  return context;
}

/** The WebMCP descriptor of a demo tool: its run, after its schema, its checks and the user's say. */
function webmcpTool(tool) {
  const annotations = {};
  if (tool.hints.readOnly) annotations.readOnlyHint = true;
  if (tool.hints.destructive) annotations.destructiveHint = true;
  if (tool.hints.untrustedContent) annotations.untrustedContentHint = true;
  return {
    name: tool.name,
    title: tool.title,
    description: tool.description,
    inputSchema: tool.inputSchema,
    annotations,
    async execute(input) {
      const issues = checkSchema(tool.inputSchema, input);
      if (issues.length === 0 && tool.validate) issues.push(...tool.validate(input));
      if (issues.length > 0) throw new Error(issues.map((i) => `${i.path}: ${i.message}`).join('; '));
      if ((tool.hints.destructive || tool.hints.consequential) && !confirm(tool.summarize?.(input).summary ?? tool.title)) {
        throw new Error('The user declined');
      }
      const result = await tool.run(input);
      if (result.status !== 'ok') throw new Error(`${result.status}: ${JSON.stringify(result.issues ?? result)}`);
      return result.data;
    },
  };
}

/**
 * Registers the demo's tools through WebMCP and connects them with GET /v1/webmcp.js to the page
 * socket at `pagePath`; `token()` answers a fresh page token for each connection attempt.
 * Returns the connection ({clientId, close}).
 */
export async function startWebMCP(tools, pagePath, token) {
  const { connectWebMCP } = await import('/v1/webmcp.js');
  const modelContext = globalThis.document.modelContext ?? globalThis.navigator.modelContext ?? inPageModelContext();
  // Connect first: the module learns each tool (and its execute) as it is registered.
  const connection = connectWebMCP({ url: new URL(pagePath, location.href).pathname, token, modelContext });
  for (const tool of tools) await modelContext.registerTool(webmcpTool(tool));
  return connection;
}
