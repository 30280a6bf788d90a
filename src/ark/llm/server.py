"""A minimal OpenAI-compatible chat-completions server on loopback.

It serves a ``generate(request: dict) -> dict`` function (request = the JSON body of
``POST /v1/chat/completions``; result = an OpenAI ``chat.completion`` object, or raise ``HTTPError``)
so that any local model is reached through litellm exactly like a hosted one
(``model="openai/<name>"``, ``api_base=server.url``). Used for the embedded SmolLM2 model, and by the
tests with a scripted generator as the fake endpoint.
"""
from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HTTPError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def chat_completion(model: str, message: dict, finish_reason: str, prompt_tokens: int, completion_tokens: int) -> dict:
    """An OpenAI ``chat.completion`` response object around one assistant message."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default listen backlog of 5 drops connections when many agents call at once


class ChatServer:
    """``with ChatServer(generate) as server: ... server.url ...`` — started in a daemon thread."""

    def __init__(self, generate, host: str = "127.0.0.1", port: int = 0, model_name: str = "local"):
        self.generate, self.model_name = generate, model_name
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                # headers and body go out in two writes: without this, Nagle + delayed ACK add ~40 ms a call
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args):  # keep test and stage output clean
                pass

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"unknown path {self.path}"}})
                    return
                server.requests += 1
                try:
                    length = int(self.headers.get("Content-Length", 0))
                    body = json.loads(self.rfile.read(length) or b"{}")
                    self._send(200, server.generate(body))
                except HTTPError as e:
                    self._send(e.status, {"error": {"message": e.message, "type": "server_error", "code": e.status}})
                except Exception as e:  # a bug in the generator is a 500 for the client, not a dead server
                    self._send(500, {"error": {"message": f"{type(e).__name__}: {e}", "type": "server_error"}})

            def _send(self, status: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = _Server((host, port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "ChatServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
