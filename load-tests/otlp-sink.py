#!/usr/bin/env python3
"""An OTLP/HTTP receiver that takes every export and keeps nothing: the far end of the
gateway's trace exporter when a benchmark measures what tracing costs the gateway (not the
collector). `python3 load-tests/otlp-sink.py [PORT]` (default 4318) serves until stopped and,
at the end, prints how many exports and bytes it took."""

import http.server
import signal
import sys

taken = {"exports": 0, "bytes": 0}


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        taken["exports"] += 1
        taken["bytes"] += length
        # An empty ExportTraceServiceResponse: zero bytes of protobuf.
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def stop(*_):
    # SIGTERM or SIGINT (a background job of a script ignores SIGINT: kill it with TERM).
    raise KeyboardInterrupt


port = int(sys.argv[1]) if len(sys.argv) > 1 else 4318
signal.signal(signal.SIGTERM, stop)
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Sink)
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
finally:
    print(f"otlp-sink: {taken['exports']} exports, {taken['bytes']} bytes", file=sys.stderr, flush=True)
