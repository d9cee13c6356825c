#!/usr/bin/env node
// Mints a Toolmark page token in your backend (Node's standard library only): an HS256 JWT with
// the tenant's token secret, naming the user and conversation the page may serve.
//
//   TOOLMARK_TENANT=acme TOOLMARK_TOKEN_SECRET=... node mint.mjs <user> <conversation>
//
// Give the token to the page-side bridge; it opens
// wss://<gateway>/v1/tenants/<tenant>/page?token=<token>.

import { createHmac, randomUUID } from 'node:crypto';

const b64url = (data) => Buffer.from(data).toString('base64url');

export function mint(tenant, secret, user, conversation, ttlSeconds = 3600) {
  const now = Math.floor(Date.now() / 1000);
  const header = { alg: 'HS256', typ: 'JWT' };
  const claims = { sub: user, cnv: conversation, aud: tenant, iat: now, exp: now + ttlSeconds, jti: randomUUID() };
  const signingInput = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
  const signature = createHmac('sha256', secret).update(signingInput).digest('base64url');
  return `${signingInput}.${signature}`;
}

const [user, conversation] = process.argv.slice(2);
console.log(mint(process.env.TOOLMARK_TENANT, process.env.TOOLMARK_TOKEN_SECRET, user, conversation));
