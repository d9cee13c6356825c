// Pages only: PAGES browser pages connect, publish their manifest and answer calls for
// PAGE_SECONDS. Pair it with agents.js (or your own agent backend) calling the same prefix.
//   k6 run -e TOOLMARK_URL=… -e TOOLMARK_TENANT=… -e TOOLMARK_TOKEN_SECRET=… pages.js

import exec from 'k6/execution';

import { config } from './lib/config.js';
import { pageThresholds } from './lib/metrics.js';
import { runPage } from './lib/page.js';

export const options = {
  scenarios: {
    pages: {
      executor: 'per-vu-iterations',
      exec: 'page',
      vus: config.pages,
      iterations: 1,
      maxDuration: `${config.pageSeconds + 30}s`,
    },
  },
  thresholds: pageThresholds(),
};

export function page() {
  runPage(exec.scenario.iterationInTest, config.pageSeconds);
}
