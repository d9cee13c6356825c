// One agent call: POST …/users/{u}/conversations/{c}/calls, checked and timed. A call succeeds
// when the answer is 200 with the outcome the page gives (echo: ok with the same input;
// bench.delete: needs_confirmation).

import { check } from 'k6';
import http from 'k6/http';

import { apiBase, config, conversation, user } from './config.js';
import { callDuration, callFailed, callTimeouts } from './metrics.js';
import { CONFIRM_TOOL, ECHO_TOOL } from './page.js';

export function agentCall(index, n) {
  const confirm = Math.random() < config.confirmShare;
  const tool = confirm ? CONFIRM_TOOL : ECHO_TOOL;
  const url = `${apiBase(config.agentUrl)}/users/${user(index)}/conversations/${conversation(index)}/calls`;
  const res = http.post(url, JSON.stringify({ tool, input: { n }, timeoutMs: config.callTimeoutMs }), {
    headers: { Authorization: `Bearer ${config.apiKey}`, 'Content-Type': 'application/json' },
    tags: { name: 'POST calls', tool },
    responseCallback: http.expectedStatuses(200),
  });
  let outcome = null;
  if (res.status === 200) {
    try {
      outcome = res.json('outcome');
    } catch (_) {
      outcome = null;
    }
  }
  if (outcome && outcome.status === 'timeout') callTimeouts.add(1);
  const ok = check(res, {
    'call answered 200': (r) => r.status === 200,
    'outcome as the page gave it': () =>
      outcome !== null &&
      (confirm
        ? outcome.status === 'needs_confirmation'
        : outcome.status === 'ok' && outcome.data && outcome.data.n === n),
  });
  callFailed.add(!ok, { tool });
  if (res.status !== 0) callDuration.add(res.timings.duration, { tool });
}
