"""A minimal OpenAI-compatible chat-completions server on loopback (uvicorn + starlette).

It serves a ``generate(request: dict) -> dict`` function (request = the JSON body of
``POST /v1/chat/completions``; result = an OpenAI ``chat.completion`` object, or raise ``HTTPError``)
so that any local model is reached through litellm exactly like a hosted one
(``model="openai/<name>"``, ``api_base=server.url``). Used for the embedded SmolLM2 model, and by the
tests with a scripted generator as the fake endpoint.

Under load: at most ``workers`` generations run at once, each in its own thread, the other requests wait in
arrival order; at most ``max_queue`` requests are admitted (waiting or running), beyond that the answer is 503 with
``Retry-After`` (litellm raises ``ServiceUnavailableError``, which the client retries). A request whose client goes
away (a timeout) while it waits is dropped without being computed, so a client's retries never pile up work; one
already being computed runs to its end and its reply goes nowhere, quietly.
"""
from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import uuid

import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

log = logging.getLogger(__name__)


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


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "server_error", "code": status}}, status, headers)


async def _disconnect(receive) -> None:
    """Returns when the client has closed the connection (the request body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class ChatServer:
    """``with ChatServer(generate) as server: ... server.url ...`` — uvicorn in a daemon thread.

    ``workers``: generations at once (1 for a model that computes one request at a time); ``max_queue``: requests
    admitted, waiting or running. Counters: ``requests`` received, ``generated`` (``generate`` called),
    ``dropped`` (client gone before its turn), ``abandoned`` (generated, but the client had gone), ``rejected``
    (503, queue full)."""

    def __init__(self, generate, host: str = "127.0.0.1", port: int = 0, model_name: str = "local",
                 workers: int = 64, max_queue: int = 256, retry_after: int = 1):
        self.generate, self.model_name = generate, model_name
        self.max_queue, self.retry_after = max_queue, retry_after
        self.requests = self.generated = self.dropped = self.abandoned = self.rejected = 0
        self._admitted, self._slots = 0, asyncio.Semaphore(workers)
        self.socket = socket.create_server((host, port), backlog=256)
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])])
        config = uvicorn.Config(app, http="h11", lifespan="off", log_config=None, log_level="warning",
                                access_log=False, backlog=256)
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, kwargs={"sockets": [self.socket]}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "ChatServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.uvicorn.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the chat server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.uvicorn.should_exit = self.uvicorn.force_exit = True  # a generation still running is abandoned
        self.thread.join(timeout=10)
        self.socket.close()
        log.info("chat server: %d requests, %d generated (%d for a client gone), %d dropped uncomputed (client gone), "
                 "%d turned away (queue full)", self.requests, self.generated, self.abandoned, self.dropped,
                 self.rejected)

    # ------------------------------------------------------------------ requests
    async def _handle(self, request: Request) -> Response:
        path = request.url.path.rstrip("/")
        if request.method == "GET":
            if path.endswith("/models"):
                return JSONResponse({"object": "list", "data": [{"id": self.model_name, "object": "model"}]})
            return _error(404, "not found")
        if not path.endswith("/chat/completions"):
            return _error(404, f"unknown path {request.url.path}")
        self.requests += 1
        if self._admitted >= self.max_queue:
            self.rejected += 1
            return _error(503, f"{self._admitted} requests queued; retry later", {"Retry-After": str(self.retry_after)})
        self._admitted += 1
        try:
            try:
                body = json.loads(await request.body() or b"{}")
            except ClientDisconnect:
                self.dropped += 1
                return Response(status_code=499)
            except ValueError as e:
                return _error(400, f"the body is not JSON: {e}")
            if not await self._turn(request):
                self.dropped += 1
                return Response(status_code=499)  # nobody reads it
            try:
                self.generated += 1
                result = await self._in_thread(body)
                self.abandoned += await request.is_disconnected()
                return JSONResponse(result)
            except HTTPError as e:
                return _error(e.status, e.message)
            except Exception as e:  # a bug in the generator is a 500 for the client, not a dead server
                return _error(500, f"{type(e).__name__}: {e}")
            finally:
                self._slots.release()
        finally:
            self._admitted -= 1

    async def _turn(self, request: Request) -> bool:
        """Wait for a free worker, in arrival order: True holding one, False (holding none) if the client left first."""
        slot = asyncio.ensure_future(self._slots.acquire())
        gone = asyncio.ensure_future(_disconnect(request.receive))
        await asyncio.wait({slot, gone}, return_when=asyncio.FIRST_COMPLETED)
        left = gone.done()
        gone.cancel()
        if not left and not await request.is_disconnected():
            return True
        if slot.done():
            self._slots.release()
        else:
            slot.cancel()
        return False

    def _in_thread(self, body: dict) -> asyncio.Future:
        """``generate(body)`` in a daemon thread (a generation still running at exit does not hold the process)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(ok: bool, value) -> None:
            if not future.cancelled():
                future.set_result(value) if ok else future.set_exception(value)

        def work() -> None:
            try:
                outcome = True, self.generate(body)
            except Exception as e:
                outcome = False, e
            try:
                loop.call_soon_threadsafe(settle, *outcome)
            except RuntimeError:  # the server has stopped
                pass

        threading.Thread(target=work, daemon=True).start()
        return future
