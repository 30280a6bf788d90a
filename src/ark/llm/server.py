"""A minimal OpenAI-compatible chat-completions server on loopback (uvicorn + starlette).

It serves a ``generate(request: dict) -> dict`` function (request = the JSON body of
``POST /v1/chat/completions``; result = an OpenAI ``chat.completion`` object, or raise ``HTTPError``)
so that any local model is reached through litellm exactly like a hosted one
(``model="openai/<name>"``, ``api_base=server.url``). Used for the embedded SmolLM2 model, and by the
tests with a scripted generator as the fake endpoint.

Under load: at most ``workers`` generations run at once, in worker threads, the other requests wait in arrival
order; at most ``max_queue`` requests are admitted (waiting or running), beyond that the answer is 503 with
``Retry-After`` (litellm raises ``ServiceUnavailableError``, which the client retries). A request whose client goes
away (a timeout) while it waits is dropped without being computed; one already being computed runs to its end.
With ``keep_abandoned`` (a model whose reply is a function of the request, as the embedded one) that reply then
answers the client's retry, the same body, instead of a second generation: timeouts and retries add no generation.

Against a client that misbehaves: a body over ``max_body_bytes`` is refused (413) as soon as its length is known,
before it is held in memory, and the bodies being read on all connections together may hold at most
``max_pending_bytes`` (beyond, 503); a connection that has not sent a request's headers within ``header_timeout``
seconds (its first request's, and each next one's on a kept-alive connection) is closed, and one that has not sent
its whole body within ``body_timeout`` gets 408; at most ``max_connections`` connections are served at once (beyond,
503). A request counts toward ``max_queue`` only once its body is complete,
so half-sent bodies cannot crowd out the clients that finish theirs.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import socket
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.h11_impl import H11Protocol
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ark.llm.schema import RequestError, check_chat_request

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


def _error(status: int, message: str, headers: dict | None = None, kind: str | None = None) -> JSONResponse:
    """An OpenAI error body: ``invalid_request_error`` for a client's 4xx, ``server_error`` otherwise."""
    kind = kind or ("invalid_request_error" if 400 <= status < 500 else "server_error")
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status, headers)


class BodyTooLarge(Exception):
    pass


class BodiesTooLarge(Exception):
    """The bodies being read on all connections together would pass the server's budget."""


class BodyBudget:
    """The bytes of request bodies held at once, across connections (``max_pending_bytes``): many connections each
    under the per-request limit cannot add up to the machine's memory."""

    def __init__(self, limit: int):
        self.limit, self.held = limit, 0

    def take(self, n: int) -> None:
        if self.held + n > self.limit:
            raise BodiesTooLarge()
        self.held += n

    def give(self, n: int) -> None:
        self.held -= n


async def read_body(request: Request, limit: int, budget: BodyBudget | None = None) -> bytes:
    """The request body, refused (``BodyTooLarge``) as soon as its declared or received length passes ``limit``,
    and (``BodiesTooLarge``) when it would take ``budget`` past its limit; the budget is given back on return."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge()
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge()
            if budget is not None:
                budget.take(len(chunk))
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        if budget is not None:
            budget.give(sum(map(len, chunks)))


def _header_deadline_protocol(timeout: float):
    """uvicorn's h11 protocol, closing a connection whose next request's headers are not complete within
    ``timeout``: the first request's, and each later one's on a kept-alive connection (a client trickling a byte now
    and then would otherwise hold it, and the memory of its half-read headers, for ever)."""

    class Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._header_timer = None
            self._await_headers()

        def _await_headers(self) -> None:
            self._header_cycle = self.cycle  # the last request's cycle: a new one means new headers arrived
            self._header_timer = self.loop.call_later(timeout, self._no_headers)

        def handle_events(self) -> None:
            super().handle_events()
            if self._header_timer is not None and self.cycle is not self._header_cycle:
                self._header_timer.cancel()
                self._header_timer = None

        def on_response_complete(self) -> None:
            if self._header_timer is None and not self.transport.is_closing():
                self._await_headers()  # before a pipelined request is taken up, which cancels it at once
            super().on_response_complete()

        def connection_lost(self, exc) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            super().connection_lost(exc)

        def _no_headers(self) -> None:
            self._header_timer = None
            if self.cycle is self._header_cycle and not self.transport.is_closing():
                self.transport.close()

    return Protocol


async def _disconnect(receive) -> None:
    """Returns when the client has closed the connection (the request body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class ChatServer:
    """``with ChatServer(generate) as server: ... server.url ...`` — uvicorn in a daemon thread.

    ``workers``: generations at once (1 for a model that computes one request at a time); ``max_queue``: requests
    admitted, waiting or running; ``on_exit``: called as the server stops, before it waits for the generations
    under way (a model's ``cancel``); ``check``: the request's schema, ``body -> body`` raising ``RequestError``
    (default: ``ark.llm.schema.check_chat_request``), run before the request waits for a worker. Counters:
    ``requests`` received, ``generated`` (``generate`` called),
    ``dropped`` (client gone before its turn), ``abandoned`` (generated, but the client had gone), ``reused`` (a
    retry answered by such a generation), ``rejected`` (503, queue full)."""

    def __init__(self, generate, host: str = "127.0.0.1", port: int = 0, model_name: str = "local",
                 workers: int = 64, max_queue: int = 256, retry_after: int = 1, keep_abandoned: bool = False,
                 max_body_bytes: int = 8 * 2**20, header_timeout: float = 10.0, body_timeout: float = 30.0,
                 max_connections: int = 512, max_pending_bytes: int = 64 * 2**20, on_exit=None, check=None):
        self.generate, self.model_name, self.on_exit = generate, model_name, on_exit
        self.check = check or check_chat_request
        self.max_body_bytes, self.body_timeout = max_body_bytes, body_timeout
        self.bodies = BodyBudget(max_pending_bytes)
        self.created = int(time.time())  # what /v1/models reports: a restarted server is another endpoint
        self.max_queue, self.retry_after, self.keep_abandoned = max_queue, retry_after, keep_abandoned
        self.requests = self.generated = self.dropped = self.abandoned = self.reused = self.rejected = 0
        self._admitted, self._slots = 0, asyncio.Semaphore(workers)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="chat-generate")
        self._running: dict[str, list] = {}  # request key -> [future, request, claimed by a retry]
        self._kept: OrderedDict[str, dict] = OrderedDict()  # request key -> a reply whose client had gone
        self.socket = socket.create_server((host, port), backlog=256)
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by each connection
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])])
        config = uvicorn.Config(app, http=_header_deadline_protocol(header_timeout), lifespan="off", log_config=None,
                                log_level="warning", access_log=False, backlog=256, limit_concurrency=max_connections,
                                h11_max_incomplete_event_size=64 * 1024)
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
        self.uvicorn.should_exit = self.uvicorn.force_exit = True
        self.thread.join(timeout=10)
        self.socket.close()
        if self.on_exit is not None:  # the generations under way stop at their next step (the model's cancel)
            self.on_exit()
        # a generation still running (its client gone) ends first: a thread inside torch at exit aborts the process
        self._pool.shutdown(wait=True, cancel_futures=True)
        log.info("chat server: %d requests, %d generated (%d for a client gone, %d of them reused by its retry), "
                 "%d dropped uncomputed (client gone), %d turned away (queue full)", self.requests, self.generated,
                 self.abandoned, self.reused, self.dropped, self.rejected)

    # ------------------------------------------------------------------ requests
    async def _handle(self, request: Request) -> Response:
        path = request.url.path.rstrip("/")
        if request.method == "GET":
            if path.endswith("/models"):
                return JSONResponse({"object": "list", "data": [{"id": self.model_name, "object": "model",
                                                                 "created": self.created, "owned_by": "ark"}]})
            if path in ("/health", "/v1/health"):  # what a load balancer or a script waiting for the server polls
                return JSONResponse({"status": "ok", "model": self.model_name})
            return _error(404, "not found")
        if not path.endswith("/chat/completions"):
            return _error(404, f"unknown path {request.url.path}")
        self.requests += 1
        try:
            raw = await asyncio.wait_for(read_body(request, self.max_body_bytes, self.bodies), self.body_timeout)
        except BodyTooLarge:
            return _error(413, f"the request body is over {self.max_body_bytes:,} bytes")
        except BodiesTooLarge:
            self.rejected += 1
            return _error(503, f"the request bodies being read pass {self.bodies.limit:,} bytes; retry later",
                          {"Retry-After": str(self.retry_after)})
        except asyncio.TimeoutError:
            return _error(408, f"the request body did not arrive within {self.body_timeout:g} s")
        except ClientDisconnect:
            self.dropped += 1
            return Response(status_code=499)
        except asyncio.CancelledError:  # the server is stopping
            return Response(status_code=503)
        if self._admitted >= self.max_queue:
            self.rejected += 1
            return _error(503, f"{self._admitted} requests queued; retry later", {"Retry-After": str(self.retry_after)})
        self._admitted += 1
        try:
            try:
                body = json.loads(raw or b"{}")
            except ValueError as e:
                return _error(400, f"the body is not JSON: {e}")
            except RecursionError:
                return _error(400, "the body is nested deeper than the JSON reader's limit")
            try:
                body = self.check(body)
            except RequestError as e:
                return _error(e.status, e.message, kind=e.code)
            return JSONResponse(await self._reply(request, body))
        except ClientDisconnect:
            self.dropped += 1
            return Response(status_code=499)  # nobody reads it
        except asyncio.CancelledError:  # the server is stopping
            return Response(status_code=503)
        except HTTPError as e:
            return _error(e.status, e.message)
        except RequestError as e:
            return _error(e.status, e.message, kind=e.code)
        except Exception as e:  # a bug in the generator is a 500 for the client, not a dead server
            return _error(500, f"{type(e).__name__}: {e}")
        finally:
            self._admitted -= 1

    async def _reply(self, request: Request, body: dict) -> dict:
        """``generate(body)`` in a worker thread, in turn; with ``keep_abandoned``, the reply to the same body
        generated (or being generated) for a client that has gone."""
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if self.keep_abandoned:
            if key in self._kept:
                self.reused += 1
                return self._kept.pop(key)
            running = self._running.get(key)
            if running is not None and not running[2] and await running[1].is_disconnected():
                running[2] = True
                self.reused += 1
                return await asyncio.shield(running[0])
        if not await self._turn(request):
            raise ClientDisconnect()
        running = [asyncio.get_running_loop().run_in_executor(self._pool, self.generate, body), request, False]
        self._running[key] = running
        self.generated += 1
        try:
            result = await running[0]
        finally:
            self._slots.release()
            if self._running.get(key) is running:
                del self._running[key]
        if await request.is_disconnected():
            self.abandoned += 1
            if self.keep_abandoned and not running[2]:
                self._kept[key] = result
                while len(self._kept) > 64:
                    self._kept.popitem(last=False)
        return result

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
