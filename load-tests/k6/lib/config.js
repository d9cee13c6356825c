// Settings of every Toolmark k6 scenario, read from environment variables (k6 -e NAME=value or
// the process environment). Secrets (API key, token secret) come only from here.

function str(name, fallback) {
  const v = __ENV[name];
  return v === undefined || v === '' ? fallback : v;
}

function num(name, fallback) {
  const v = str(name, undefined);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`${name}: not a number: ${v}`);
  return n;
}

const url = str('TOOLMARK_URL', 'http://127.0.0.1:8080').replace(/\/+$/, '');

export const config = {
  // Pages connect here; agent calls go to TOOLMARK_AGENT_URL (default: the same node).
  url,
  agentUrl: str('TOOLMARK_AGENT_URL', url).replace(/\/+$/, ''),
  tenant: str('TOOLMARK_TENANT', 'dev'),
  apiKey: str('TOOLMARK_API_KEY', ''),
  // With a token secret, page tokens are signed here (HS256); without, they are minted by the
  // gateway's POST /tokens with the API key.
  tokenSecret: str('TOOLMARK_TOKEN_SECRET', ''),
  origin: str('TOOLMARK_ORIGIN', 'http://127.0.0.1:8080'),
  // Conversation ids are PREFIX-c{i}, users PREFIX-u{i}, so runs can share a gateway.
  prefix: str('TOOLMARK_PREFIX', 'k6'),
  pages: num('PAGES', 50),
  // How long each page stays connected, and how long agents call at a constant rate.
  pageSeconds: num('PAGE_SECONDS', 40),
  callRate: num('CALL_RATE', 100),
  callSeconds: num('CALL_SECONDS', 30),
  // Agents start this long after the pages, so that every manifest is in place.
  callStartSeconds: num('CALL_START_SECONDS', 5),
  // Share of calls that go to the consequential tool (needs_confirmation, then approval).
  confirmShare: num('CONFIRM_SHARE', 0.1),
  // How long a page waits before answering a call and before approving a confirmation.
  answerDelayMs: num('ANSWER_DELAY_MS', 0),
  approveDelayMs: num('APPROVE_DELAY_MS', 20),
  callTimeoutMs: num('CALL_TIMEOUT_MS', 5000),
  // Thresholds: k6 exits non-zero (99) when any is crossed.
  p95Ms: num('P95_MS', 50),
  p99Ms: num('P99_MS', 200),
  maxFailedRate: num('MAX_FAILED_RATE', 0.001),
  maxVus: num('MAX_VUS', 200),
};

export function pageSocketUrl(token) {
  const ws = config.url.replace(/^http/, 'ws');
  return `${ws}/v1/tenants/${config.tenant}/page?token=${token}`;
}

export function apiBase(base) {
  return `${base}/v1/tenants/${config.tenant}`;
}

export function user(i) {
  return `${config.prefix}-u${i}`;
}

export function conversation(i) {
  return `${config.prefix}-c${i}`;
}
