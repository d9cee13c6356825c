// Page tokens: HS256 JWTs (sub = user, cnv = conversation, aud = tenant, exp), signed here with
// k6/crypto when the tenant's token secret is given, otherwise minted by POST /tokens.

import crypto from 'k6/crypto';
import encoding from 'k6/encoding';
import http from 'k6/http';

import { apiBase, config } from './config.js';

const TTL_SECONDS = 3600;

function b64url(text) {
  return encoding.b64encode(text, 'rawurl');
}

// An HS256 JWT over `claims` with `secret` (the secret's UTF-8 bytes are the key).
export function signHs256(claims, secret) {
  const signingInput = `${b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }))}.${b64url(JSON.stringify(claims))}`;
  const signature = crypto.hmac('sha256', secret, signingInput, 'base64rawurl');
  return `${signingInput}.${signature}`;
}

// A page token for (tenant, user, conversation), or throws saying why none could be had.
export function pageToken(userId, conversationId) {
  if (config.tokenSecret) {
    const now = Math.floor(Date.now() / 1000);
    return signHs256(
      { sub: userId, cnv: conversationId, aud: config.tenant, iat: now, exp: now + TTL_SECONDS },
      config.tokenSecret,
    );
  }
  if (!config.apiKey) {
    throw new Error('set TOOLMARK_TOKEN_SECRET or TOOLMARK_API_KEY to get page tokens');
  }
  const res = http.post(
    `${apiBase(config.url)}/tokens`,
    JSON.stringify({ user: userId, conversation: conversationId, ttlSeconds: TTL_SECONDS }),
    {
      headers: { Authorization: `Bearer ${config.apiKey}`, 'Content-Type': 'application/json' },
      tags: { name: 'POST /tokens' },
    },
  );
  if (res.status !== 201) throw new Error(`POST /tokens: HTTP ${res.status} ${res.body}`);
  return res.json('token');
}
