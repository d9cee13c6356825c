#!/usr/bin/env python3
"""Mints a Toolmark page token in your backend (Python standard library only): an HS256 JWT
with the tenant's token secret, naming the user and conversation the page may serve.

    TOOLMARK_TENANT=acme TOOLMARK_TOKEN_SECRET=... python3 mint.py <user> <conversation>

Give the token to the page-side bridge; it opens
wss://<gateway>/v1/tenants/<tenant>/page?token=<token>."""

import base64
import hashlib
import hmac
import json
import os
import sys
import time
import uuid


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(tenant: str, secret: str, user: str, conversation: str, ttl: int = 3600) -> str:
    now = int(time.time())
    header = {"alg": "HS256", "typ": "JWT"}
    claims = {"sub": user, "cnv": conversation, "aud": tenant, "iat": now, "exp": now + ttl,
              "jti": str(uuid.uuid4())}
    signing_input = ".".join(b64url(json.dumps(part, separators=(",", ":")).encode())
                             for part in (header, claims))
    signature = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


if __name__ == "__main__":
    user, conversation = sys.argv[1], sys.argv[2]
    print(mint(os.environ["TOOLMARK_TENANT"], os.environ["TOOLMARK_TOKEN_SECRET"], user, conversation))
