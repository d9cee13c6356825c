// Agents only: calls at a constant arrival rate (CALL_RATE per second for CALL_SECONDS) to the
// conversations PREFIX-c0 … PREFIX-c{PAGES-1}, whose pages must be connected (pages.js).
//   k6 run -e TOOLMARK_URL=… -e TOOLMARK_TENANT=… -e TOOLMARK_API_KEY=… agents.js

import exec from 'k6/execution';

import { agentCall } from './lib/agent.js';
import { config } from './lib/config.js';
import { callThresholds } from './lib/metrics.js';

export const options = {
  scenarios: {
    agents: {
      executor: 'constant-arrival-rate',
      exec: 'agent',
      rate: config.callRate,
      timeUnit: '1s',
      duration: `${config.callSeconds}s`,
      preAllocatedVUs: Math.min(config.maxVus, Math.max(20, Math.ceil(config.callRate / 10))),
      maxVUs: config.maxVus,
    },
  },
  thresholds: callThresholds(),
};

export function agent() {
  const n = exec.scenario.iterationInTest;
  agentCall(n % config.pages, n);
}
