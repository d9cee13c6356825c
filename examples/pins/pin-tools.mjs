#!/usr/bin/env node
// Computes a tenant's pin list from the app's own tool definitions, at build time: for each
// tool, {name, digest} with digest = "sha256:" + the hex SHA-256 of the RFC 8785 (JCS) form of
// {name, title?, description, hints} exactly as the page registers them (docs/integrate.md,
// "Pinning your tools"). The gateway computes the same digest of what pages present.
//
//   node examples/pins/pin-tools.mjs tools.json [off|report|enforce] > pins.json   (default enforce)
//   curl -X PUT "$ADMIN/admin/v1/tenants/acme/tools" -H "authorization: Bearer $KEY" \
//     -H 'content-type: application/json' --data @pins.json
//
// tools.json: the array of tool definitions the app registers (the objects given to
// registerTool, or a manifest's tools); fields other than the four are ignored.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

/** RFC 8785: object keys sorted by UTF-16 code units (JavaScript's own string order), no
 * whitespace, strings and numbers as JSON.stringify writes them (ECMAScript's forms). */
export function canonical(v) {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  const keys = Object.keys(v).filter((k) => v[k] !== undefined).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
}

/** The digest that pins one tool definition. */
export function digest(tool) {
  const def = { name: tool.name, description: tool.description, hints: tool.hints ?? {} };
  if (tool.title !== undefined) def.title = tool.title;
  return `sha256:${createHash('sha256').update(canonical(def), 'utf8').digest('hex')}`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [file, mode = 'enforce'] = process.argv.slice(2);
  if (!file || !['off', 'report', 'enforce'].includes(mode)) {
    console.error('usage: node pin-tools.mjs tools.json [off|report|enforce]');
    process.exit(2);
  }
  const tools = JSON.parse(readFileSync(file, 'utf8'));
  const list = Array.isArray(tools) ? tools : tools.tools;
  process.stdout.write(
    `${JSON.stringify({ mode, tools: list.map((t) => ({ name: t.name, digest: digest(t) })) }, null, 2)}\n`,
  );
}
