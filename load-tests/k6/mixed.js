// Pages and agents together: PAGES pages connect and stay for PAGE_SECONDS; CALL_START_SECONDS
// later, agents call them at CALL_RATE per second for CALL_SECONDS, a CONFIRM_SHARE of the calls
// to the consequential tool, which the page approves. Thresholds on call latency (P95_MS, P99_MS)
// and failed calls (MAX_FAILED_RATE) make k6 exit 99 when the gateway is too slow.
//   k6 run -e TOOLMARK_URL=… -e TOOLMARK_AGENT_URL=… -e TOOLMARK_TENANT=… \
//          -e TOOLMARK_API_KEY=… -e TOOLMARK_TOKEN_SECRET=… mixed.js

import exec from 'k6/execution';

import { agentCall } from './lib/agent.js';
import { config } from './lib/config.js';
import { callThresholds, pageThresholds } from './lib/metrics.js';
import { runPage } from './lib/page.js';

if (config.callStartSeconds + config.callSeconds > config.pageSeconds) {
  throw new Error('PAGE_SECONDS must cover CALL_START_SECONDS + CALL_SECONDS');
}

export const options = {
  scenarios: {
    pages: {
      executor: 'per-vu-iterations',
      exec: 'page',
      vus: config.pages,
      iterations: 1,
      maxDuration: `${config.pageSeconds + 30}s`,
    },
    agents: {
      executor: 'constant-arrival-rate',
      exec: 'agent',
      startTime: `${config.callStartSeconds}s`,
      rate: config.callRate,
      timeUnit: '1s',
      duration: `${config.callSeconds}s`,
      preAllocatedVUs: Math.min(config.maxVus, Math.max(20, Math.ceil(config.callRate / 10))),
      maxVUs: config.maxVus,
    },
  },
  thresholds: Object.assign({}, callThresholds(), pageThresholds()),
};

export function page() {
  runPage(exec.scenario.iterationInTest, config.pageSeconds);
}

export function agent() {
  const n = exec.scenario.iterationInTest;
  agentCall(n % config.pages, n);
}
