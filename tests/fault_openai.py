"""Test double: the scripted endpoint of ``ark.llm.fake`` with seeded faults injected per request (loopback only).

Whether a request is faulted, and how, is a function of the seed, the request body and how many times that
body was seen before: the same seed gives the same faults whatever the order in which concurrent agents ask.
A body is faulted at most ``max_in_a_row`` times, so a client with more attempts always gets its answer.

Transport faults (``TRANSIENT``, ``PERMANENT``) replace the reply; content faults (``CONTENT``) change a
well-formed reply. With ``echo_key`` every reply, error bodies included, carries the API key the request
came with (its Authorization header), as some providers and proxies do.
"""
from __future__ import annotations

import hashlib
import json
import random
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ark.llm.server import HTTPError, chat_completion
from ark.llm.fake import ScriptedEndpoint, call, search_then_answer

TRANSIENT = ("429", "500", "hang", "cut", "nonjson")
PERMANENT = ("401", "400")
CONTENT = ("bad_json_args", "unknown_tool", "node_out_of_range", "node_negative", "oversized")
ALL = TRANSIENT + PERMANENT + CONTENT
OVERSIZED = 300_000  # characters of an oversized reply
_RAW = "__raw__"  # a payload key that makes the server write bytes itself (a cut or a non-JSON body)


def body_hash(request: dict) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:16]


class FaultEndpoint(ScriptedEndpoint):
    """``FaultEndpoint(faults, rate, seed)``; ``log``: (body hash, outcome) per request in arrival order, outcome
    ``"ok"`` or the fault; ``on_request(n)`` is called with the running request count as each one arrives."""

    def __init__(self, faults=TRANSIENT, rate: float = 0.2, seed: int = 0, hang: float = 2.0, max_in_a_row: int = 3,
                 echo_key: bool = False, script=search_then_answer, on_request=None):
        super().__init__(script)
        unknown = set(faults) - set(ALL)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}")
        self.faults, self.rate, self.seed, self.hang = tuple(faults), rate, seed, min(hang, 10.0)
        self.max_in_a_row, self.echo_key, self.on_request = max_in_a_row, echo_key, on_request
        self.log: list[tuple[str, str]] = []
        self._seen: Counter = Counter()
        self._auth = threading.local()  # the key of the request the current handler thread serves

    def fault(self, key: str, k: int) -> str | None:
        """The fault of the ``k``-th arrival (from 0) of the body hashed ``key``, or None."""
        if k >= self.max_in_a_row or not self.faults:
            return None
        rng = random.Random(f"{self.seed}/{key}/{k}")
        return rng.choice(self.faults) if rng.random() < self.rate else None

    def generate(self, request: dict) -> dict:
        key = body_hash(request)
        with self._lock:
            fault = self.fault(key, self._seen[key])
            self._seen[key] += 1
            self.calls += 1
            self.requests.append(request)
            self.log.append((key, fault or "ok"))
            n = self.calls
        if self.on_request is not None:
            self.on_request(n)
        secret = getattr(self._auth, "key", "") if self.echo_key else ""
        echo = f" (key {secret})" if secret else ""
        if fault in ("429", "500", "401", "400"):
            reason = {"429": "rate limited", "500": "server error", "401": "invalid API key", "400": "bad request"}
            raise HTTPError(int(fault), reason[fault] + echo)
        if fault == "hang":  # past the client's timeout, then answer a client that is gone
            time.sleep(self.hang)
        message = self.script(request)
        if fault in CONTENT:
            message = _bad_content(message, fault)
        if secret:
            message = _with_key(message, secret)
        reply = chat_completion(request["model"], message, "tool_calls", prompt_tokens=100, completion_tokens=20)
        if fault == "cut":
            reply[_RAW] = ("cut", json.dumps(reply).encode())
        elif fault == "nonjson":
            reply[_RAW] = ("nonjson", f"<html><body>502 Bad Gateway{echo}</body></html>".encode())
        return reply

    def serve(self) -> "FaultServer":
        return FaultServer(self)


class FaultServer(ThreadingHTTPServer):
    """``with FaultServer(endpoint) as server: ... server.url ...``: 127.0.0.1, a free port, a daemon thread. Its
    own few lines of HTTP (not ``ark.llm.server``): a cut or non-JSON body needs the bytes in hand."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self, endpoint: FaultEndpoint):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.endpoint = endpoint
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def handle_error(self, request, client_address) -> None:
        pass  # a hung request's client is gone: writing its reply fails, quietly

    def __enter__(self) -> "FaultServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def do_POST(self):
        endpoint = self.server.endpoint
        endpoint._auth.key = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        try:
            reply = endpoint.generate(body)
        except HTTPError as e:
            return self._send(e.status, json.dumps({"error": {"message": e.message, "code": e.status}}).encode())
        kind, data = reply.pop(_RAW, (None, None))
        if kind == "cut":  # the headers promise the whole body, the connection closes after half of it
            self.close_connection = True
            return self._send(200, data, cut=True)
        if kind == "nonjson":
            return self._send(200, data, "text/html")
        self._send(200, json.dumps(reply).encode())

    def _send(self, status: int, data: bytes, content_type: str = "application/json", cut: bool = False):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2] if cut else data)
        self.wfile.flush()


def _bad_content(message: dict, fault: str) -> dict:
    calls = list(message.get("tool_calls") or [])
    if fault == "bad_json_args":
        calls.insert(0, {"id": "call_7", "type": "function",
                         "function": {"name": "search_in_graph", "arguments": '{"query": "unterminated'}})
    elif fault == "unknown_tool":
        calls.insert(0, call("delete_graph", {"confirm": True}, 7))
    elif fault in ("node_out_of_range", "node_negative"):
        node = 10**12 if fault == "node_out_of_range" else -3
        calls.insert(0, call("add_to_answer", {"answer_nodes": [{"node_index": node}]}, 7))
        calls.insert(1, call("search_in_neighborhood", {"node_index": node}, 8))
    elif fault == "oversized":
        return {**message, "content": "x" * OVERSIZED}
    return {**message, "tool_calls": calls}


def _with_key(message: dict, secret: str) -> dict:
    """The reply with the key in its text and in every tool call's arguments (and in a tool name)."""
    calls = []
    for c in message.get("tool_calls") or []:
        name, args = c["function"]["name"], c["function"]["arguments"]
        try:
            parsed = json.loads(args)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            if name == "search_in_graph":
                parsed["query"] = f"{parsed.get('query', '')} {secret}"
            elif name == "finish":
                parsed["comment"] = secret
            elif name == "add_to_answer":
                for node in parsed.get("answer_nodes") or []:
                    if isinstance(node, dict):
                        node["reasoning"] = secret
            args = json.dumps(parsed)
        else:
            args = args + secret
        calls.append({**c, "function": {"name": name, "arguments": args}})
    calls.append(call(f"tool_{secret}", {"key": secret}, 9))
    return {**message, "content": f"{message.get('content') or ''} using {secret}", "tool_calls": calls}
