"""A simulated app page for the end-to-end tests: pairs with toolmark-mcp over a real WebSocket
(with the Origin header a browser would send) and serves tools as a protocol v1 bridge with
caller mcp. Calls and cancels are handed to the test."""

import json
import uuid

import anyio
from websockets.asyncio.client import connect

WAIT = 10


def tool(name, hints=None):
    """A page tool: its manifest summary plus the input schema describe returns."""
    return {
        "name": name,
        "llmName": name.replace(".", "__"),
        "title": f"Title of {name}",
        "description": f"Description of {name}.",
        "hints": hints or {},
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    }


class SimPage:
    def __init__(self, ws, tools):
        self.ws = ws
        self.tools = tools
        self.client_id = str(uuid.uuid4())
        self.calls_tx, self.calls = anyio.create_memory_object_stream(100)
        self.cancels_tx, self.cancels = anyio.create_memory_object_stream(100)

    @classmethod
    async def pair(cls, port, code, origin, tools):
        ws = await connect(f"ws://127.0.0.1:{port}", origin=origin, max_size=None)
        await ws.send(json.dumps({"type": "pair", "code": code}))
        answer = json.loads(await ws.recv())
        assert answer["type"] == "paired", answer
        assert len(answer["token"]) == 64
        return cls(ws, tools)

    @classmethod
    async def open(cls, url, origin, tools):
        """A page of the gateway: its page socket at `url` (from POST /tokens)."""
        ws = await connect(url, origin=origin, max_size=None)
        return cls(ws, tools)

    async def send(self, message):
        await self.ws.send(json.dumps(message))

    async def answer(self, call_id, result):
        await self.send({"protocol": 1, "type": "result", "clientId": self.client_id, "id": call_id, "result": result})

    async def serve(self):
        """Sends the manifest, then answers describes and forwards calls and cancels until closed."""
        summaries = [{k: v for k, v in t.items() if k != "inputSchema"} for t in self.tools]
        await self.send({"protocol": 1, "type": "manifest", "clientId": self.client_id, "rev": 1, "tools": summaries})
        async for raw in self.ws:
            message = json.loads(raw)
            assert message["protocol"] == 1
            if message["clientId"] != self.client_id:
                continue
            if message["type"] == "describe":
                entry = next((t for t in self.tools if t["name"] == message["tool"]), None)
                result = {"status": "ok", "data": entry} if entry else {
                    "status": "refused", "code": "unknown_tool", "message": "no such tool", "rev": 1}
                await self.answer(message["id"], result)
            elif message["type"] == "call":
                await self.calls_tx.send(message)
            elif message["type"] == "cancel":
                await self.cancels_tx.send(message)

    async def next_call(self):
        with anyio.fail_after(WAIT):
            return await self.calls.receive()

    async def next_cancel(self):
        with anyio.fail_after(WAIT):
            return await self.cancels.receive()
