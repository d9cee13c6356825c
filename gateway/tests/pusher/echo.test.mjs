// The gateway's Pusher-protocol endpoint driven by the real pusher-js client, the library inside
// Laravel Echo's `pusher` and `reverb` broadcasters. The channel authorization is computed the
// way Laravel's /broadcasting/auth does (HMAC-SHA256 of "socket_id:channel" with the app secret);
// page -> agent messages go through /inbound, as the app's /toolmark/bridge controller forwards
// them. Run by scripts/pusher-test.sh against a dev-mode gateway.

import assert from 'node:assert/strict';
import { createHmac, randomUUID } from 'node:crypto';
import { after, test } from 'node:test';
import Pusher from 'pusher-js';

const { BASE_URL, API_KEY, PUSHER_KEY, PUSHER_SECRET } = process.env;
const TENANT = process.env.TENANT ?? 'dev';
assert.ok(BASE_URL && API_KEY && PUSHER_KEY && PUSHER_SECRET, 'BASE_URL, API_KEY, PUSHER_KEY and PUSHER_SECRET are required');
const base = new URL(BASE_URL);
const clients = [];

// A browser sends its page's Origin with the WebSocket handshake, and the gateway checks it
// against the tenant's allowed_origins; in Node, pusher-js's socket sends none unless told.
// The dev tenant allows the gateway's own origin, where the demo is served.
const NodeSocket = Pusher.Runtime.getWebSocketAPI();
let origin = base.origin;
Pusher.Runtime.getWebSocketAPI = () =>
  function OriginSocket(url) {
    return new NodeSocket(url, [], origin === null ? {} : { headers: { Origin: origin } });
  };
after(() => clients.forEach((c) => c.disconnect()));

/** What Laravel's /broadcasting/auth returns for a private channel. */
const laravelAuth = (secret, socketId, channel) =>
  `${PUSHER_KEY}:${createHmac('sha256', secret).update(`${socketId}:${channel}`).digest('hex')}`;

/** A pusher-js client whose channel authorization signs `signedChannel(channel)` with `secret`. */
function echo({ secret = PUSHER_SECRET, signedChannel = (c) => c, key = PUSHER_KEY } = {}) {
  const client = new Pusher(key, {
    cluster: 'mt1',
    wsHost: base.hostname,
    wsPort: Number(base.port),
    forceTLS: false,
    enabledTransports: ['ws'],
    disableStats: true,
    channelAuthorization: {
      customHandler: ({ socketId, channelName }, callback) =>
        callback(null, { auth: laravelAuth(secret, socketId, signedChannel(channelName)) }),
    },
  });
  clients.push(client);
  return client;
}

const within = (ms, what, promise) =>
  Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`timeout: ${what}`)), ms))]);

const subscribed = (channel) =>
  within(5000, `subscription to ${channel.name}`, new Promise((resolve) => channel.bind('pusher:subscription_succeeded', resolve)));

/** The next pusher:error the connection receives for `channelName`. */
const refused = (client, channelName) =>
  within(5000, `refusal of ${channelName}`, new Promise((resolve) => {
    client.connection.bind('message', (ev) => {
      if (ev.event === 'pusher:error' && ev.channel === channelName) resolve(ev.data);
    });
  }));

async function api(method, path, body) {
  const res = await fetch(`${BASE_URL}/v1/tenants/${TENANT}${path}`, {
    method,
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

const inbound = (user, conversation, message) => api('POST', `/users/${user}/conversations/${conversation}/inbound`, message);

const tools = [
  { name: 'todo.add', llmName: 'todo__add', description: 'Add a to-do', hints: {} },
];

test('a pusher-js page subscribes, receives a call and answers through /inbound', async () => {
  const user = `u${randomUUID().slice(0, 8)}`;
  const client = echo();
  const channel = client.subscribe(`private-toolmark.${user}.c1`);
  await subscribed(channel);
  assert.match(client.connection.socket_id, /^\d+\.\d+$/);

  const clientId = randomUUID();
  const m = await inbound(user, 'c1', { protocol: 1, type: 'manifest', clientId, rev: 1, tools });
  assert.equal(m.status, 202, JSON.stringify(m.body));

  const received = new Promise((resolve) => channel.bind('toolmark.message', resolve));
  const call = api('POST', `/users/${user}/conversations/c1/calls`, { tool: 'todo.add', input: { text: 'milk' } });
  const message = await within(5000, 'the call', received);
  assert.equal(message.type, 'call');
  assert.equal(message.clientId, clientId);
  assert.deepEqual(message.input, { text: 'milk' });

  const r = await inbound(user, 'c1', { protocol: 1, type: 'result', clientId, id: message.id, result: { status: 'ok', data: 'added' } });
  assert.equal(r.status, 202, JSON.stringify(r.body));
  const answer = await call;
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  assert.deepEqual(answer.body.outcome, { status: 'ok', data: 'added' });

  // Forwarded for another conversation than its binding: refused, with the reason.
  const again = api('POST', `/users/${user}/conversations/c1/calls`, { tool: 'todo.add', input: {}, timeoutMs: 3000 });
  const second = await within(5000, 'the second call', new Promise((resolve) => channel.bind('toolmark.message', resolve)));
  const forged = await inbound(user, 'c2', { protocol: 1, type: 'result', clientId, id: second.id, result: { status: 'ok' } });
  assert.equal(forged.status, 400);
  assert.equal(forged.body.code, 'invalid_request');
  assert.equal(forged.body.reason, 'mismatch');
  assert.equal((await inbound(user, 'c1', { protocol: 1, type: 'result', clientId, id: second.id, result: { status: 'ok' } })).status, 202);
  assert.equal((await again).body.outcome.status, 'ok');
});

test('a wrong signature, another user\'s channel and a non-toolmark channel are refused', async () => {
  const wrongSecret = echo({ secret: 'not-the-app-secret' });
  const own = 'private-toolmark.alice.c1';
  let error = refused(wrongSecret, own);
  wrongSecret.subscribe(own);
  assert.equal((await error).code, 4009);

  // The app signed alice's channel; the page asks for bob's with it.
  const otherUser = echo({ signedChannel: () => own });
  const bobs = 'private-toolmark.bob.c1';
  error = refused(otherUser, bobs);
  otherUser.subscribe(bobs);
  assert.equal((await error).code, 4009);

  // Validly signed, but not a toolmark channel: nothing is served there.
  const other = echo();
  const notOurs = 'private-App.Models.User.1';
  error = refused(other, notOurs);
  other.subscribe(notOurs);
  assert.equal((await error).code, 4009);
  // The same connection still subscribes to its own channel.
  await subscribed(other.subscribe(own));
});

test('an unknown app key is refused for good', async () => {
  const client = echo({ key: 'no-such-key' });
  const states = [];
  const codes = [];
  client.connection.bind('state_change', ({ current }) => states.push(current));
  client.connection.bind('error', (e) => codes.push(e?.error?.data?.code ?? e?.data?.code));
  await new Promise((resolve) => setTimeout(resolve, 2500));
  assert.ok(codes.includes(4001), `a 4001 refusal, got ${JSON.stringify(codes)}`);
  assert.ok(!states.includes('connected'), JSON.stringify(states));
  const last = states.lastIndexOf('connecting');
  assert.ok(last < states.indexOf('disconnected'), `no reconnection after the refusal: ${JSON.stringify(states)}`);
});

test('a page of an origin the tenant does not allow is refused for good', async () => {
  // Sockets opened while this test runs carry the other origin (tests of a file run in turn).
  origin = 'https://attacker.example';
  try {
    const client = echo();
    const states = [];
    client.connection.bind('state_change', ({ current }) => states.push(current));
    const code = await within(5000, 'the refusal', new Promise((resolve) => {
      client.connection.bind('error', (e) => {
        const c = e?.error?.data?.code ?? e?.data?.code;
        if (c !== undefined) resolve(c);
      });
    }));
    assert.equal(code, 4009, 'pusher:error 4009: the origin is not allowed');
    assert.ok(!states.includes('connected'), JSON.stringify(states));
  } finally {
    origin = base.origin;
  }
});
