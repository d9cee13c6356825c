#!/usr/bin/env python3
"""An agent loop over Toolmark Gateway (Python standard library only).

It fetches the conversation's two LLM tools (`GET …/llm-tools`, `page_call` and
`page_describe`), hands them to a model in Anthropic's or OpenAI's tool-use shape, invokes what
the model chose through `POST …/llm-tools/invoke`, appends the `content` the gateway returns as
the tool result, and loops until the model answers in text. When a consequential tool answers
`needs_confirmation`, the model reads that a confirmation waits in the page; the loop follows
the conversation's events (SSE, opened before the first tool runs) until that confirmation's
`confirmation.resolved`, appends its
`toolResultMessage`, and runs one follow-up turn without page tools.

A model is anything with `respond(messages, tools) -> reply` in its provider's shape; plug a
real client in (Anthropic Messages API, OpenAI Chat Completions). `ScriptedModel` in
`test_agent.py` plays one from a script, with no network.

    python3 agent.py  (see run() for the parameters)
"""

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request


class Gateway:
    """The agent API of one tenant, with its API key."""

    def __init__(self, base, tenant, key):
        self.base = f"{base}/v1/tenants/{tenant}"
        self.key = key

    def _request(self, method, path, body=None, headers=None):
        req = urllib.request.Request(
            f"{self.base}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json",
                     **(headers or {})})
        with urllib.request.urlopen(req, timeout=620) as r:
            return json.loads(r.read())

    def llm_tools(self, user, conversation, fmt):
        return self._request("GET", f"/users/{user}/conversations/{conversation}/llm-tools?format={fmt}")

    def invoke(self, user, conversation, name, tool_input, use_id):
        # The tool use's id as the Idempotency-Key: sending it again (after a dropped
        # connection, a 503) answers the first outcome and never runs the tool twice.
        key = f"{conversation}.{use_id}"
        for attempt in range(3):
            try:
                return self._request(
                    "POST", f"/users/{user}/conversations/{conversation}/llm-tools/invoke",
                    {"name": name, "input": tool_input}, {"Idempotency-Key": key})
            except (urllib.error.URLError, ConnectionError) as e:
                code = getattr(e, "code", None)
                if code is not None and code not in (429, 503) or attempt == 2:
                    raise
                time.sleep(1)

    def follow_confirmations(self, user, conversation):
        """Starts reading the conversation's events (SSE) in the background, before any tool
        runs, so that no `confirmation.resolved` is missed; returns the follower."""
        return ConfirmationFollower(self, user, conversation)


class ConfirmationFollower:
    """The `confirmation.resolved` events of one conversation, by confirmId."""

    def __init__(self, gateway, user, conversation):
        self.resolved = {}
        self.changed = threading.Condition()
        url = urllib.parse.urlsplit(f"{gateway.base}/events?user={user}&conversation={conversation}")
        connection = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        self.connection = connection(url.netloc, timeout=620)
        self.connection.request("GET", f"{url.path}?{url.query}", headers={
            "Authorization": f"Bearer {gateway.key}", "Accept": "text/event-stream"})
        self.stream = self.connection.getresponse()
        if self.stream.status != 200:
            raise RuntimeError(f"GET /events answered {self.stream.status}")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            self._follow()
        except (OSError, ValueError, AttributeError):
            pass  # the stream was closed (close()) or broke: nothing more to follow

    def _follow(self):
        kind, data = None, []
        for raw in self.stream:
            line = raw.decode().rstrip("\n")
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and data:
                event = json.loads("\n".join(data))
                body = event.get("data", event)
                if kind == "confirmation.resolved" and "confirmId" in body:
                    with self.changed:
                        self.resolved[body["confirmId"]] = body
                        self.changed.notify_all()
                kind, data = None, []

    def wait(self, confirm_id, timeout=620):
        """The resolution of `confirm_id` (its outcome and `toolResultMessage`)."""
        with self.changed:
            if not self.changed.wait_for(lambda: confirm_id in self.resolved, timeout):
                raise TimeoutError(f"no confirmation.resolved for {confirm_id}")
            return self.resolved[confirm_id]

    def close(self):
        """Stops following: the socket is shut, which ends the reading thread."""
        if self.connection.sock is not None:
            self.connection.sock.shutdown(socket.SHUT_RDWR)
        self.connection.close()


# ---------------------------------------------------------------- provider shapes

def tool_uses(fmt, reply):
    """The tool uses of a model reply: [(id, name, input)]."""
    if fmt == "anthropic":
        return [(b["id"], b["name"], b["input"]) for b in reply["content"] if b["type"] == "tool_use"]
    message = reply["choices"][0]["message"]
    return [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in message.get("tool_calls") or []]


def text_of(fmt, reply):
    if fmt == "anthropic":
        return "".join(b["text"] for b in reply["content"] if b["type"] == "text")
    return reply["choices"][0]["message"].get("content") or ""


def assistant_message(fmt, reply):
    if fmt == "anthropic":
        return {"role": "assistant", "content": reply["content"]}
    return reply["choices"][0]["message"]


def tool_result_message(fmt, use_id, content):
    text = json.dumps(content)
    if fmt == "anthropic":
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use_id, "content": text}]}
    return {"role": "tool", "tool_call_id": use_id, "content": text}


# ---------------------------------------------------------------- the loop

def run(gateway, model, user, conversation, prompt, fmt="anthropic", max_turns=8):
    """Runs the loop for one user prompt; returns the transcript (messages) and the final text."""
    tools = gateway.llm_tools(user, conversation, fmt)["tools"]
    follower = gateway.follow_confirmations(user, conversation)
    messages = [{"role": "user", "content": prompt}]
    waiting = []  # confirmIds the page holds
    for _ in range(max_turns):
        reply = model.respond(messages, tools)
        messages.append(assistant_message(fmt, reply))
        uses = tool_uses(fmt, reply)
        if not uses:
            break
        for use_id, name, tool_input in uses:
            answer = gateway.invoke(user, conversation, name, tool_input, use_id)
            messages.append(tool_result_message(fmt, use_id, answer["content"]))
            outcome = answer["outcome"]
            if outcome.get("status") == "needs_confirmation":
                waiting.append(outcome["confirmId"])
    else:
        raise RuntimeError("the model kept calling tools")
    for confirm_id in waiting:
        # The user approves (or rejects) in the page; its outcome comes back as an event.
        resolved = follower.wait(confirm_id)["toolResultMessage"]
        messages.append({"role": "user", "content": "A confirmation was resolved in the page: "
                         + json.dumps(resolved["content"])})
        # One follow-up turn, without page tools, limited to acknowledging the outcome.
        reply = model.respond(messages, [])
        messages.append(assistant_message(fmt, reply))
    follower.close()
    return messages, text_of(fmt, reply)
