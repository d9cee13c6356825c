#!/usr/bin/env python3
"""The attack of issue 33, point 2, as a measurement: one MCP token sends N `initialize` (each
followed by `notifications/initialized` when it got a session) to a running gateway, as fast as
one connection allows; the gateway's resident memory is read before, after, and again after a
pause. Prints one JSON line: answers by status, refusal codes, RSS in KiB, the ratio.

    load-tests/mcp-initialize-flood.py --url http://127.0.0.1:8080 --tenant acme \
        --api-key KEY --pid PID [--count 5000] [--settle 5] [--warmup]

--warmup first begins one session and ends it (DELETE) with a token of another user, so that
what the node sets up once for the endpoint is in "before".

Only the standard library: it runs wherever the gateway's tests run.
"""

import argparse
import collections
import http.client
import json
import time
import urllib.parse


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit(f"no VmRSS for pid {pid}")


def request(conn, method, path, headers, body=None):
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--tenant", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--warmup", action="store_true")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
    base = f"/v1/tenants/{a.tenant}"
    def headers_of(user):
        status, _, body = request(
            conn, "POST", f"{base}/tokens",
            {"authorization": f"Bearer {a.api_key}", "content-type": "application/json"},
            json.dumps({"user": user, "conversation": "c1", "scope": "mcp"}),
        )
        if status != 201:
            raise SystemExit(f"no MCP token: {status} {body!r}")
        token = json.loads(body)["token"]
        return {"authorization": f"Bearer {token}", "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp-protocol-version": "2025-06-18"}

    mcp = headers_of("u1")
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "flood", "version": "1"}}})
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    if a.warmup:
        w = headers_of("warmup")
        status, headers, _ = request(conn, "POST", f"{base}/mcp", w, init)
        if status != 200 or "mcp-session-id" not in headers:
            raise SystemExit(f"warm-up initialize answered {status}")
        w["mcp-session-id"] = headers["mcp-session-id"]
        request(conn, "POST", f"{base}/mcp", w, note)
        request(conn, "DELETE", f"{base}/mcp", w)
        time.sleep(1)
    before = rss_kib(a.pid)
    statuses = collections.Counter()
    codes = collections.Counter()
    started = time.monotonic()
    for _ in range(a.count):
        status, headers, body = request(conn, "POST", f"{base}/mcp", mcp, init)
        statuses[status] += 1
        if status == 200 and "mcp-session-id" in headers:
            h = dict(mcp, **{"mcp-session-id": headers["mcp-session-id"]})
            request(conn, "POST", f"{base}/mcp", h, note)
        elif status != 200:
            try:
                codes[json.loads(body).get("code", "?")] += 1
            except ValueError:
                codes["?"] += 1
    elapsed = time.monotonic() - started
    after = rss_kib(a.pid)
    time.sleep(a.settle)
    settled = rss_kib(a.pid)
    print(json.dumps({
        "initialize": a.count, "seconds": round(elapsed, 1),
        "statuses": dict(statuses), "refusals": dict(codes),
        "rss_kib": {"before": before, "after": after, "settled": settled},
        "ratio_after": round(after / before, 3), "ratio_settled": round(settled / before, 3),
    }))


if __name__ == "__main__":
    main()
