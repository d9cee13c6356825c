// The figures every scenario records and the thresholds that make k6 exit non-zero.

import { Counter, Rate, Trend } from 'k6/metrics';

import { config } from './config.js';

// Agent side: round trip of POST …/calls from request to complete answer, and whether the call
// failed (anything but 200 with the expected outcome: HTTP error, transport error, timeout).
export const callDuration = new Trend('toolmark_call_duration', true);
export const callFailed = new Rate('toolmark_call_failed');
export const callTimeouts = new Counter('toolmark_call_timeouts');
// Page side.
export const pageConnect = new Trend('toolmark_page_connect', true);
export const pageErrors = new Counter('toolmark_page_errors');
export const pageReconnects = new Counter('toolmark_page_reconnects');
export const callsAnswered = new Counter('toolmark_calls_answered');
export const confirmationsApproved = new Counter('toolmark_confirmations_approved');

export function callThresholds() {
  return {
    toolmark_call_duration: [`p(95)<${config.p95Ms}`, `p(99)<${config.p99Ms}`],
    toolmark_call_failed: [`rate<${config.maxFailedRate}`],
  };
}

export function pageThresholds() {
  return {
    toolmark_page_errors: ['count==0'],
  };
}
