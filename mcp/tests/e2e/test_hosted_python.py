"""End to end with the Python MCP SDK against the gateway's hosted MCP endpoint
(/v1/tenants/dev/mcp): a session revision (the initialize handshake) and the newest, stateless
revision (server/discover, subscriptions/listen), with a simulated page on a page socket. Run
twice by scripts/mcp-e2e.sh: against a dev-mode gateway, and against two gateways on one Redis
with the page on the first (PAGE_BASE_URL) and the client on the second (BASE_URL)."""

import json
import os
import urllib.error
import urllib.request

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from sim_page import SimPage, tool

BASE = os.environ.get("BASE_URL", "")
KEY = os.environ.get("DEV_KEY", "")
# Where the page connects: another node than the MCP client's when set (two gateways on one
# Redis), else the same gateway.
PAGE_BASE = os.environ.get("PAGE_BASE_URL", "") or BASE
# The page's Origin: one of the tenant's allowed_origins (a dev gateway allows its own).
PAGE_ORIGIN = os.environ.get("PAGE_ORIGIN", "") or PAGE_BASE
WAIT = 10
TOOLS = [tool("todo.add"), tool("todo.list", {"readOnly": True, "untrustedContent": True})]


def post(path, body):
    assert BASE and KEY, "set BASE_URL and DEV_KEY to a dev-mode gateway (scripts/mcp-e2e.sh does)"
    req = urllib.request.Request(
        f"{BASE}/v1/tenants/dev{path}", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def minted(user, conversation, scope=None):
    body = {"user": user, "conversation": conversation}
    if scope:
        body["scope"] = scope
    return post("/tokens", body)


def page_url(user, conversation):
    """A page socket URL for the user and conversation, on PAGE_BASE."""
    url = minted(user, conversation)["url"]
    ws_base = BASE.replace("http", "ws", 1)
    return PAGE_BASE.replace("http", "ws", 1) + url[len(ws_base):]


def client(token, url=None, **kw):
    mcp_url = url or f"{BASE}/v1/tenants/dev/mcp"
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(mcp_url, http_client=http), cache=None, **kw)


def names(listing):
    return sorted(t.name for t in listing.tools)


def test_a_session_client_lists_calls_cancels_and_hears_list_changed():
    async def main():
        changed = anyio.Event()

        async def on_message(message):
            if isinstance(message, types.ToolListChangedNotification):
                changed.set()

        mcp_token = minted("u-py", "c-session", "mcp")
        assert mcp_token["url"] == f"{BASE}/v1/tenants/dev/mcp"
        async with client(mcp_token["token"], mode="legacy", message_handler=on_message) as c:
            assert c.protocol_version < "2026-07-28", c.protocol_version
            # No page open: nothing listed.
            assert names(await c.list_tools()) == []
            page = await SimPage.open(page_url("u-py", "c-session"), PAGE_ORIGIN, TOOLS)
            async with anyio.create_task_group() as tg:
                tg.start_soon(page.serve)
                with anyio.fail_after(WAIT):
                    await changed.wait()
                listing = await c.list_tools()
                assert names(listing) == ["todo__add", "todo__list"]
                untrusted = next(t for t in listing.tools if t.name == "todo__list")
                assert untrusted.meta == {"toolmark/untrustedContent": True}
                assert untrusted.input_schema == TOOLS[1]["inputSchema"]

                async def answer_one():
                    call = await page.next_call()
                    assert call["tool"] == "todo.add" and call["input"] == {"text": "Buy milk"}
                    await page.answer(call["id"], {"status": "ok", "data": {"id": 1}})
                tg.start_soon(answer_one)
                result = await c.call_tool("todo__add", {"text": "Buy milk"})
                assert not result.is_error
                assert result.structured_content == {"status": "ok", "data": {"id": 1}}

                # A consequential tool's needs_confirmation is its result.
                async def ask_confirmation():
                    call = await page.next_call()
                    await page.answer(call["id"], {"status": "needs_confirmation", "confirmId": "cf-1", "summary": "Add it"})
                tg.start_soon(ask_confirmation)
                result = await c.call_tool("todo__add", {"text": "Big"})
                assert not result.is_error
                assert result.structured_content["status"] == "needs_confirmation"
                assert result.content[0].text.startswith("A confirmation waits in the user's page")

                # A cancelled request reaches the page as cancel.
                with anyio.move_on_after(WAIT):
                    async with anyio.create_task_group() as calling:
                        calling.start_soon(c.call_tool, "todo__add", {"text": "never mind"})
                        call = await page.next_call()
                        calling.cancel_scope.cancel()
                cancel = await page.next_cancel()
                assert cancel["id"] == call["id"]
                await page.ws.close()
                tg.cancel_scope.cancel()

    anyio.run(main)


def test_a_stateless_client_hears_list_changed_on_its_subscription():
    async def main():
        mcp_token = minted("u-py", "c-stateless", "mcp")
        async with client(mcp_token["token"]) as c:
            assert c.protocol_version == "2026-07-28", c.protocol_version
            assert names(await c.list_tools()) == []
            async with c.listen(tools_list_changed=True) as subscription:
                page = await SimPage.open(page_url("u-py", "c-stateless"), PAGE_ORIGIN, [tool("todo.add")])
                async with anyio.create_task_group() as tg:
                    tg.start_soon(page.serve)
                    with anyio.fail_after(WAIT):
                        event = await subscription.__anext__()
                    assert "list_changed" in type(event).__name__.lower() or "tool" in repr(event).lower(), event
                    assert names(await c.list_tools()) == ["todo__add"]

                    async def answer_one():
                        call = await page.next_call()
                        await page.answer(call["id"], {"status": "ok", "data": 42})
                    tg.start_soon(answer_one)
                    result = await c.call_tool("todo__add", {})
                    assert result.structured_content == {"status": "ok", "data": 42}
                    await page.ws.close()
                    tg.cancel_scope.cancel()

    anyio.run(main)


def test_a_page_token_does_not_open_the_endpoint():
    page_token = minted("u-py", "c-refused")["token"]
    req = urllib.request.Request(
        f"{BASE}/v1/tenants/dev/mcp", method="POST",
        data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode(),
        headers={"Authorization": f"Bearer {page_token}", "Content-Type": "application/json",
                 "Accept": "application/json, text/event-stream"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req)
    assert refused.value.code == 401
    assert refused.value.headers["WWW-Authenticate"] == 'Bearer realm="toolmark"'

    async def main():
        with pytest.raises(Exception):
            async with client(page_token, mode="legacy") as c:
                await c.list_tools()

    anyio.run(main)
