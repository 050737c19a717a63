"""A fault-injecting HTTP proxy in front of moto's S3 server, on 127.0.0.1.

Requests are forwarded unchanged; a rule makes the first ``times`` requests that match a method
and a path pattern fail instead, with 503 SlowDown, 500 InternalError, or a TCP reset. Used to
prove retry budgets and that a failed upload publishes nothing.
"""

from __future__ import annotations

import http.client
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ERROR_BODIES = {
    503: b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>',
    500: b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>',
}


@dataclass
class Rule:
    method: str
    path: re.Pattern
    kind: str  # "503" | "500" | "reset" | "hang"
    times: int  # how many matching requests fail; a large number means always
    hits: int = 0


class FaultPlan:
    def __init__(self) -> None:
        self.rules: list[Rule] = []
        self.lock = threading.Lock()

    def add(self, method: str, path_regex: str, kind: str, times: int) -> Rule:
        rule = Rule(method, re.compile(path_regex), kind, times)
        with self.lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()

    def fault_for(self, method: str, path: str) -> str | None:
        with self.lock:
            for rule in self.rules:
                if rule.method == method and rule.path.search(path) and rule.hits < rule.times:
                    rule.hits += 1
                    return rule.kind
        return None


def make_handler(upstream: tuple[str, int], plan: FaultPlan):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            fault = plan.fault_for(self.command, self.path)
            if fault == "hang":  # hold the request (the client is killed meanwhile), then drop it
                time.sleep(60)
                fault = "reset"
            if fault == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()
                return
            if fault:
                self._reply(int(fault), ERROR_BODIES[int(fault)], {"Content-Type": "application/xml"})
                return
            conn = http.client.HTTPConnection(*upstream, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("expect", "connection")}
            conn.request(self.command, self.path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            self._reply(response.status, data, dict(response.getheaders()))
            conn.close()

        def _reply(self, status: int, data: bytes, headers: dict) -> None:
            self.send_response(status)
            for k, v in headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    return Handler


class FaultProxy:
    def __init__(self, upstream_url: str) -> None:
        host, port = upstream_url.removeprefix("http://").split(":")
        self.plan = FaultPlan()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler((host, int(port)), self.plan))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
