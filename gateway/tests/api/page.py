"""A page attached to a dev-mode gateway while schemathesis fuzzes the agent API: it holds the
conversation dev/u1/c1 open with two tools, answers every describe with the tool's entry and
every call with an ok result, so calls reach a page and come back.

    python page.py <gateway base URL> <dev API key>"""

import asyncio
import json
import sys
import urllib.request
import uuid

from websockets.asyncio.client import connect

TOOLS = [
    {"name": "todo.add", "llmName": "todo__add", "description": "Adds a to-do.", "hints": {}},
    {"name": "todo.list", "llmName": "todo__list", "description": "Lists to-dos.",
     "hints": {"readOnly": True, "untrustedContent": True}},
]


def page_url(base, key):
    req = urllib.request.Request(
        f"{base}/v1/tenants/dev/tokens", method="POST",
        data=json.dumps({"user": "u1", "conversation": "c1", "ttlSeconds": 86400}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())["url"]


async def serve(base, key):
    client_id = str(uuid.uuid4())
    async with connect(page_url(base, key), origin=base, max_size=None) as ws:
        async def send(message):
            await ws.send(json.dumps({"protocol": 1, "clientId": client_id, **message}))
        await send({"type": "manifest", "rev": 1, "tools": TOOLS})
        print("page: attached", flush=True)
        async for raw in ws:
            m = json.loads(raw)
            if m.get("clientId") != client_id or m.get("type") not in ("call", "describe"):
                continue
            entry = next((t for t in TOOLS if t["name"] == m["tool"]), None)
            if entry is None:
                result = {"status": "refused", "code": "unknown_tool", "message": "no such tool", "rev": 1}
            elif m["type"] == "describe":
                result = {"status": "ok", "data": {**entry, "inputSchema": {"type": "object"}}}
            else:
                result = {"status": "ok", "data": {"echo": m.get("input")}}
            await send({"type": "result", "id": m["id"], "result": result})


asyncio.run(serve(sys.argv[1], sys.argv[2]))
