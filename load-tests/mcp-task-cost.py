#!/usr/bin/env python3
"""What an MCP task costs in Redis (issue 37): a page holds a consequential tool; an MCP client
calls it N times at the stateless 2026-07-28 revision, the page answers `needs_confirmation`
and then `confirmed` each time. Once with a client that does not declare tasks (the call's
result only), once with one that declares them (a task per call, one `tasks/get` while it waits
and `tasks/get` until it completes). Redis is read before and after each run (`INFO
commandstats`, `used_memory`): what a task adds per call, in commands (the scripts' inner
commands included) and in the bytes it keeps. Prints one JSON line.

    load-tests/mcp-task-cost.py --url http://127.0.0.1:8080 --tenant bench --api-key KEY \
        --origin http://loadgen.test --redis-cli "redis-cli -p 6390" [--count 200]

Needs the `websockets` package (the bench's venv has it).
"""

import argparse
import asyncio
import json
import shlex
import subprocess
import urllib.request
import uuid

from websockets.asyncio.client import connect

TASKS = "io.modelcontextprotocol/tasks"


def http(method, url, headers, body=None):
    req = urllib.request.Request(url, method=method, headers=headers,
                                 data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=30) as r:
        data = r.read().decode()
        kind = r.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        lines = [l[5:].strip() for l in data.splitlines() if l.startswith("data:")]
        return json.loads(lines[-1])
    return json.loads(data) if data else None


def redis(cli, *args):
    return subprocess.run(shlex.split(cli) + list(args), capture_output=True, text=True,
                          check=True).stdout


def redis_figures(cli):
    commands = 0
    for line in redis(cli, "info", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            commands += int(line.split("calls=")[1].split(",")[0])
    memory = next(int(l.split(":")[1]) for l in redis(cli, "info", "memory").splitlines()
                  if l.startswith("used_memory:"))
    return commands, memory


class Mcp:
    """Stateless 2026-07-28 requests with one MCP token, declaring tasks or not."""

    def __init__(self, url, token, tasks):
        self.url, self.n = url, 0
        self.headers = {"authorization": f"Bearer {token}", "content-type": "application/json",
                        "accept": "application/json, text/event-stream",
                        "mcp-protocol-version": "2026-07-28"}
        caps = {"extensions": {TASKS: {}}} if tasks else {}
        self.meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                     "io.modelcontextprotocol/clientCapabilities": caps}

    def request(self, method, params):
        self.n += 1
        body = {"jsonrpc": "2.0", "id": self.n, "method": method,
                "params": {**params, "_meta": self.meta}}
        # The 2026-07-28 revision names the method and its target in headers too (SEP-2243).
        name = params.get("name") or params.get("taskId")
        headers = {**self.headers, "mcp-method": method, "mcp-name": name}
        answer = http("POST", self.url, headers, body)
        if "error" in answer:
            raise SystemExit(f"{method}: {answer['error']}")
        return answer["result"]


async def measure(a):
    base = f"{a.url}/v1/tenants/{a.tenant}"
    agent = {"authorization": f"Bearer {a.api_key}", "content-type": "application/json"}
    page_url = http("POST", f"{base}/tokens", agent, {"user": "u1", "conversation": "tasks"})["url"]
    mcp_token = http("POST", f"{base}/tokens", agent,
                     {"user": "u1", "conversation": "tasks", "scope": "mcp"})["token"]
    client_id = str(uuid.uuid4())
    calls = asyncio.Queue()
    async with connect(page_url, origin=a.origin) as ws:
        async def send(m):
            await ws.send(json.dumps({"protocol": 1, "clientId": client_id, **m}))

        async def read():
            async for raw in ws:
                m = json.loads(raw)
                if m.get("type") == "call":
                    confirm_id = m["id"]
                    await send({"type": "result", "id": m["id"], "result": {
                        "status": "needs_confirmation", "confirmId": confirm_id,
                        "summary": "Submit the order"}})
                    await calls.put(confirm_id)
        reader = asyncio.create_task(read())
        await send({"type": "manifest", "rev": 1, "tools": [
            {"name": "order.submit", "llmName": "order__submit", "description": "Submits.",
             "hints": {"consequential": True}}]})
        while http("GET", f"{base}/users/u1/conversations/tasks", agent).get("clientId") != client_id:
            await asyncio.sleep(0.05)

        async def run(tasks):
            mcp = Mcp(f"{base}/mcp", mcp_token, tasks)
            before = redis_figures(a.redis_cli)
            for _ in range(a.count):
                answer = await asyncio.to_thread(
                    mcp.request, "tools/call", {"name": "order__submit", "arguments": {}})
                confirm_id = await calls.get()
                if tasks:
                    assert answer.get("resultType") == "task", answer
                    task_id = answer["taskId"]
                    await asyncio.to_thread(mcp.request, "tasks/get", {"taskId": task_id})
                await send({"type": "confirmed", "confirmId": confirm_id,
                            "result": {"status": "ok", "data": {"submitted": True}}})
                if tasks:
                    while True:
                        got = await asyncio.to_thread(mcp.request, "tasks/get", {"taskId": task_id})
                        if got["status"] != "working":
                            assert got["status"] == "completed", got
                            break
                        await asyncio.sleep(0.01)
                else:
                    assert answer["structuredContent"]["status"] == "needs_confirmation", answer
            await asyncio.sleep(1)  # the last events and relays land
            after = redis_figures(a.redis_cli)
            return after[0] - before[0], after[1] - before[1]

        plain = await run(False)
        tasked = await run(True)
        reader.cancel()
    n = a.count
    return {
        "tasks": n,
        "redis_commands_per_call_without_tasks": round(plain[0] / n, 1),
        "redis_commands_per_call_with_a_task": round(tasked[0] / n, 1),
        "redis_commands_per_task": round((tasked[0] - plain[0]) / n, 1),
        "redis_bytes_per_call_without_tasks": round(plain[1] / n),
        "redis_bytes_per_call_with_a_task": round(tasked[1] / n),
        "redis_bytes_per_task": round((tasked[1] - plain[1]) / n),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--tenant", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--origin", required=True)
    ap.add_argument("--redis-cli", required=True)
    ap.add_argument("--count", type=int, default=200)
    print(json.dumps(asyncio.run(measure(ap.parse_args())), sort_keys=True))


main()
