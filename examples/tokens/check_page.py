"""Checks a page token against a running gateway, as a page would use it: opens the page
socket with it, publishes a manifest, and waits until the agent API shows that page as the
conversation's current one. Exits non-zero (saying why) otherwise.

    python check_page.py <gateway base URL> <API key> <tenant> <user> <conversation> <token>"""

import asyncio
import json
import sys
import time
import urllib.request
import uuid

from websockets.asyncio.client import connect


async def check(base, key, tenant, user, conversation, token):
    client_id = str(uuid.uuid4())
    ws_url = base.replace("http", "ws", 1) + f"/v1/tenants/{tenant}/page?token={token}"
    async with connect(ws_url, origin=base) as ws:
        await ws.send(json.dumps({"protocol": 1, "type": "manifest", "clientId": client_id, "rev": 1,
                                  "tools": [{"name": "todo.add", "llmName": "todo__add",
                                             "description": "Adds a to-do.", "hints": {}}]}))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            req = urllib.request.Request(f"{base}/v1/tenants/{tenant}/users/{user}/conversations/{conversation}",
                                         headers={"Authorization": f"Bearer {key}"})
            with urllib.request.urlopen(req) as r:
                if json.loads(r.read()).get("clientId") == client_id:
                    return
            await asyncio.sleep(0.05)
    sys.exit(f"the page with this token never became the conversation's page")


asyncio.run(check(*sys.argv[1:7]))
