"""Runs agent.py end to end against a running gateway with a scripted model (no network): a
simulated page serves `todo.add` and a consequential `order.submit` (which answers
`needs_confirmation`, then confirms in the page a moment later); the model, in Anthropic's and
then in OpenAI's tool-use shape, adds a to-do, submits the order, and acknowledges the
confirmation in a follow-up turn without page tools.

    python test_agent.py <gateway base URL> <API key> <tenant>"""

import asyncio
import json
import sys
import threading
import time
import urllib.request
import uuid

from websockets.asyncio.client import connect

import agent

TOOLS = [
    {"name": "todo.add", "llmName": "todo__add", "description": "Adds a to-do.", "hints": {}},
    {"name": "order.submit", "llmName": "order__submit", "description": "Submits the order.",
     "hints": {"consequential": True}},
]


def page(base, key, tenant, user, conversation, ready):
    """The simulated page, in its own thread and event loop."""
    async def serve():
        req = urllib.request.Request(
            f"{base}/v1/tenants/{tenant}/tokens", method="POST",
            data=json.dumps({"user": user, "conversation": conversation}).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            url = json.loads(r.read())["url"]
        client_id = str(uuid.uuid4())
        async with connect(url, origin=base) as ws:
            async def send(m):
                await ws.send(json.dumps({"protocol": 1, "clientId": client_id, **m}))
            await send({"type": "manifest", "rev": 1, "tools": TOOLS})
            ready.set()
            async for raw in ws:
                m = json.loads(raw)
                if m.get("clientId") != client_id or m.get("type") != "call":
                    continue
                if m["tool"] == "todo.add":
                    await send({"type": "result", "id": m["id"],
                                "result": {"status": "ok", "data": {"added": m["input"]["text"]}}})
                else:
                    confirm_id = str(uuid.uuid4())
                    await send({"type": "result", "id": m["id"], "result": {
                        "status": "needs_confirmation", "confirmId": confirm_id, "summary": "Submit the order"}})
                    await asyncio.sleep(1.5)  # the user reads, then approves in the page
                    await send({"type": "confirmed", "confirmId": confirm_id,
                                "result": {"status": "ok", "data": {"submitted": True}}})
    asyncio.run(serve())


class ScriptedModel:
    """Plays a model from a script, in `fmt`'s shape, and checks what it is given."""

    def __init__(self, fmt):
        self.fmt = fmt
        self.turn = 0

    def _tool_use(self, name, tool_input):
        use_id = f"use-{self.turn}"
        if self.fmt == "anthropic":
            return {"content": [{"type": "tool_use", "id": use_id, "name": name, "input": tool_input}]}
        return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": use_id, "type": "function", "function": {"name": name, "arguments": json.dumps(tool_input)}}]}}]}

    def _text(self, text):
        if self.fmt == "anthropic":
            return {"content": [{"type": "text", "text": text}]}
        return {"choices": [{"message": {"role": "assistant", "content": text}}]}

    def respond(self, messages, tools):
        self.turn += 1
        if self.turn == 1:
            names = [t["name"] if self.fmt == "anthropic" else t["function"]["name"] for t in tools]
            assert names == ["page_call", "page_describe"], names
            description = tools[0]["description"] if self.fmt == "anthropic" else tools[0]["function"]["description"]
            assert "order.submit" in description, description
            return self._tool_use("page_call", {"tool": "todo.add", "input": {"text": "milk"}})
        last = json.dumps(messages[-1])
        if self.turn == 2:
            assert "milk" in last and "ok" in last, last
            return self._tool_use("page_call", {"tool": "order.submit", "input": {}})
        if self.turn == 3:
            assert "needs_confirmation" in last, last
            return self._text("The order waits for your confirmation in the page.")
        assert tools == [], "the follow-up turn gets no page tools"
        assert "submitted" in last and "untrustedContent" in last, last
        return self._text("Your order was submitted.")


def main(base, key, tenant):
    for fmt in ("anthropic", "openai"):
        user, conversation = "u-agent", f"c-agent-{fmt}"
        ready = threading.Event()
        threading.Thread(target=page, args=(base, key, tenant, user, conversation, ready), daemon=True).start()
        assert ready.wait(10), "the page never connected"
        gateway = agent.Gateway(base, tenant, key)
        deadline = time.monotonic() + 10
        while not gateway._request("GET", f"/users/{user}/conversations/{conversation}").get("clientId"):
            assert time.monotonic() < deadline, "the page never became current"
            time.sleep(0.05)
        messages, text = agent.run(gateway, ScriptedModel(fmt), user, conversation, "Add milk, then order.", fmt)
        assert text == "Your order was submitted.", text
        print(f"agent-loop: {fmt}: {len(messages)} messages, ends with {text!r}")


main(*sys.argv[1:4])
