// One browser page over k6/experimental/websockets: connects with a token and the tenant's
// Origin, sends its manifest, answers calls (bench.echo at once, bench.delete with
// needs_confirmation and a later approval), and reconnects with the same clientId (without
// resending the manifest) when the gateway closes it with 1001 (node draining).

import { WebSocket } from 'k6/experimental/websockets';
import { clearTimeout, setTimeout } from 'k6/timers';
import { uuidv4 } from './uuid.js';

import { config, conversation, pageSocketUrl, user } from './config.js';
import {
  callsAnswered,
  confirmationsApproved,
  pageConnect,
  pageErrors,
  pageReconnects,
} from './metrics.js';
import { pageToken } from './token.js';

export const ECHO_TOOL = 'bench.echo';
export const CONFIRM_TOOL = 'bench.delete';

function manifest(clientId) {
  return {
    protocol: 1,
    type: 'manifest',
    clientId,
    rev: 1,
    tools: [
      { name: ECHO_TOOL, llmName: 'bench__echo', description: 'Echo', hints: { readOnly: true } },
      {
        name: CONFIRM_TOOL,
        llmName: 'bench__delete',
        description: 'Delete (asks the user first)',
        hints: { consequential: true },
      },
    ],
  };
}

function reply(ws, clientId, call) {
  if (call.tool === CONFIRM_TOOL) {
    const confirmId = uuidv4();
    ws.send(JSON.stringify({
      protocol: 1,
      type: 'result',
      clientId,
      id: call.id,
      result: { status: 'needs_confirmation', confirmId, summary: 'Delete the bench item' },
    }));
    setTimeout(() => {
      if (ws.readyState !== 1) return;
      ws.send(JSON.stringify({
        protocol: 1,
        type: 'confirmed',
        clientId,
        confirmId,
        result: { status: 'ok' },
      }));
      confirmationsApproved.add(1);
    }, config.approveDelayMs);
  } else {
    ws.send(JSON.stringify({
      protocol: 1,
      type: 'result',
      clientId,
      id: call.id,
      result: { status: 'ok', data: call.input },
    }));
  }
  callsAnswered.add(1);
}

// Keeps page `index` connected for `seconds`, then closes it.
export function runPage(index, seconds) {
  const clientId = uuidv4();
  const token = pageToken(user(index), conversation(index));
  const endAt = Date.now() + seconds * 1000;
  let manifestSent = false;

  function open() {
    const started = Date.now();
    const ws = new WebSocket(pageSocketUrl(token), null, { headers: { Origin: config.origin } });
    let closing = false;
    const closer = setTimeout(() => {
      closing = true;
      ws.close(1000);
    }, Math.max(0, endAt - Date.now()));
    ws.onopen = () => {
      pageConnect.add(Date.now() - started);
      if (!manifestSent) {
        ws.send(JSON.stringify(manifest(clientId)));
        manifestSent = true;
      }
    };
    ws.onmessage = (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch (_) {
        return;
      }
      if (frame.type !== 'call' || frame.clientId !== clientId) return;
      if (config.answerDelayMs > 0) {
        setTimeout(() => {
          if (ws.readyState === 1) reply(ws, clientId, frame);
        }, config.answerDelayMs);
      } else {
        reply(ws, clientId, frame);
      }
    };
    ws.onerror = (e) => {
      // k6 reports the end of the TCP stream after its own close frame as an error: not one.
      if (closing) return;
      console.warn(`page ${index}: error ${e.error || e.type}`);
      pageErrors.add(1);
    };
    ws.onclose = (event) => {
      clearTimeout(closer);
      if (event.code === 1001 && Date.now() < endAt) {
        // The node drains: come back (through the load balancer) with the same clientId.
        pageReconnects.add(1);
        setTimeout(open, 50 + Math.floor(Math.random() * 200));
      } else if (event.code !== 1000 && event.code !== 1005 && Date.now() < endAt) {
        pageErrors.add(1, { reason: `closed ${event.code}` });
      }
    };
  }

  open();
}
