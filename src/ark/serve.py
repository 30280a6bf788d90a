"""``ark serve [overrides]``: the embedded model, or a distilled student, as an OpenAI-compatible server.

The same model and server a stage starts on loopback for ``backbone=local_smollm2`` or ``backbone=student``
(``ark.llm.local``, ``ark.llm.server``: ``GET /v1/models``, ``POST /v1/chat/completions`` with tools, and the
server's limits against misbehaving clients, ``llm.server``), here kept up until Ctrl-C so that another tool, a
script or another clone's run can reach it by URL.

What ``ark serve`` adds to that server, for clients written against OpenAI's API (``OpenAISurface``): ``"stream":
true`` answered with server-sent events (``chat.completion.chunk`` objects, tool calls included, ``[DONE]`` last;
the events go out once the reply is decoded whole, the embedded model does not emit tokens as it decodes them),
``POST /v1/completions`` refused with a pointer to chat completions (the model is served with its chat template
only), and one log line per request on stderr (time, route, status, tokens in and out, milliseconds).
"""
from __future__ import annotations

import contextvars
import dataclasses
import json
import sys
import threading
import time
from pathlib import Path

from ark.errors import UserError


def served_name(backbone) -> str:
    """What ``/v1/models`` calls the model: the embedded model's name, and the adapter's directory for a student."""
    name = backbone.model.split("/", 1)[-1]
    return f"{name}-{Path(backbone.local.adapter).name}" if backbone.local.adapter else name


def run_command(backbone, url: str) -> str:
    """The evaluation that ``ark serve`` prints: ``backbone=served`` (conf/backbone/served.yaml) named after the
    served model, with the served backbone's sampling where it differs from that file's, its URL where it is not
    the file's default, and no more queries in flight than the server decodes together (``queries_in_flight``)."""
    from omegaconf import OmegaConf

    from ark.config import CONF, compose

    name = served_name(backbone)
    run = compose(["backbone=served"])  # the printed run's own defaults: agents a query, queries in flight
    words = ["python -m ark.stages.evaluate backbone=served", f"backbone.name={name}", f"backbone.model=openai/{name}"]
    default = OmegaConf.load(CONF / "backbone" / "served.yaml")
    if url != default.api_base:
        words.append(f"backbone.api_base={url}")
    words += [f"backbone.{key}={getattr(backbone, key)}" for key in ("temperature", "top_p", "max_tokens")
              if getattr(backbone, key) != default.get(key)]
    fitted = queries_in_flight(backbone.local.decode_rows, run.agent.n_agents)
    if fitted < run.eval.concurrency:
        words.append(f"eval.concurrency={fitted}")
    return " ".join([*words, "eval.limit=5"])


def queries_in_flight(decode_rows: int, n_agents: int) -> int:
    """The queries a run against the server keeps in flight so that its requests fit one decoding step: with
    the defaults' 8 queries of 3 agents, 15 requests for 5 queries took turns on an AVX2-only CPU until 3 of the
    5 queries had failed on the client's 120 s timeout (``benchmarks/serve_run.py``, benchmarks/README.md)."""
    return max(1, decode_rows // max(1, n_agents))


def usage(backbone, url: str) -> str:
    """How to reach the server: a run, curl, the openai client, litellm."""
    name = served_name(backbone)
    return "\n".join([
        f"serving {name} at {url} (Ctrl-C stops it)",
        "a run against it (named after the served model):",
        f"  {run_command(backbone, url)}",
        f"  (it decodes up to {backbone.local.decode_rows} requests a step, backbone.local.decode_rows, and the run "
        f"keeps no more in flight; a reply is at most {backbone.max_tokens} tokens, backbone.max_tokens)",
        f"curl:    curl -s {url}/chat/completions -H 'Content-Type: application/json' "
        f"-d '{{\"model\": \"{name}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'",
        f"openai:  OpenAI(base_url=\"{url}\", api_key=\"none\").chat.completions.create(model=\"{name}\", ...)",
        f"litellm: litellm.completion(model=\"openai/{name}\", api_base=\"{url}\", api_key=\"none\", ...)",
    ])


def capped(generate, max_tokens: int):
    """``generate`` with every request's reply held to ``max_tokens``: a client asking for more (a hosted
    backbone's 1,024) would keep a decoding row for minutes while the small model runs on inside a string."""
    from ark.llm.server import HTTPError

    def generate_capped(request: dict) -> dict:
        asked = next((request[k] for k in ("max_tokens", "max_completion_tokens") if request.get(k) is not None),
                     max_tokens)
        if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
            raise HTTPError(400, f"max_tokens must be a positive integer, not {asked!r}"[:200])
        return generate({**request, "max_tokens": min(asked, max_tokens), "max_completion_tokens": None})
    return generate_capped


# The rows of a decoding step unless backbone.local.decode_rows is given: a step computes all of them however few
# requests are decoding, so a lone client pays for every row. At 24 rows (a default run's requests in flight) one
# stream decoded 2.3 tokens a second on an AVX2-only CPU; more requests than rows take turns by steps
# (benchmarks/serve_load.py, benchmarks/README.md).
SERVE_ROWS = 8


def served_config(overrides: list[str]):
    """The config ``ark serve`` builds its model from: the embedded model unless a backbone is chosen, decoding
    ``SERVE_ROWS`` requests a step unless ``backbone.local.decode_rows`` is given."""
    from ark.config import compose

    keys = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    if "backbone" not in keys:
        overrides = ["backbone=local_smollm2", *overrides]
    cfg = compose(overrides)
    if "backbone.local.decode_rows" not in keys and "local" in cfg.backbone:
        cfg.backbone.local.decode_rows = SERVE_ROWS
    return cfg


def in_flight(cfg) -> int:
    """The requests a default run against the server keeps in flight: agent.n_agents x eval.concurrency."""
    return cfg.agent.n_agents * cfg.eval.concurrency


def fewer_heaps() -> None:
    """At most two glibc heaps (arenas) for the server's threads, set before the model loads. By default each
    decoding thread may get a heap of its own, where freed key/value tensors stay mapped while another thread
    allocates: a default run of 5 queries peaked at 14.7 GiB in one run and 8.0 GiB in another, and at 8.3-8.4 GiB
    in each of three with two heaps (benchmarks/README.md, serve_run.py)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, 2)  # M_ARENA_MAX
    except (OSError, AttributeError):  # not glibc: its allocator is left as it is
        pass


# After this many seconds with no request the server lets go of a burst's memory; an agent's steps follow each other
# within milliseconds of tool time, so a run in progress is never taken for idle.
IDLE_S = 3.0
# While requests run, the heap's free pages go back to the system this often. Freed key/value tensors stay resident
# in glibc's heaps while other requests allocate larger ones: six conversations of 2.7k then 5.3k tokens under the
# 1 GiB key/value bound peaked at 3.6 GiB, 1.5 GiB of it free heap; 2.8 GiB with a trim a second, 2.5 GiB with one
# every 0.25 s (4.5 ms each, the same wall time; benchmarks/serve_heap.py)
TRIM_S = 0.25
# the kept prompts an idle server holds on to: a system prompt and its tools (a default run's is ~1,500 tokens),
# about 94 MB in float32
IDLE_KEEP_TOKENS = 2048


class IdleRelease:
    """Memory back during and after a burst: while requests run, the heap's free pages go back to the system every
    ``trim_s`` seconds (``trim``); once no request has been computed for ``idle_s`` seconds, the model's kept
    prompts (``ark.llm.local.PrefixCache``, up to its whole key/value bound while nothing is in flight) shrink to
    their ``keep_tokens`` most recently used, and the heap's free pages go back too. A burst of 20 agent-length
    requests left 1.24x the idle memory resident without the idle release (benchmarks/serve_load.py)."""

    def __init__(self, model, idle_s: float = IDLE_S, keep_tokens: int = IDLE_KEEP_TOKENS, trim_s: float = TRIM_S,
                 trim=None):
        self.model, self.idle_s, self.keep_tokens, self.trim_s = model, idle_s, keep_tokens, trim_s
        if trim is None:
            from ark.llm.local import release_free_memory as trim
        self.trim = trim
        self.busy, self.last, self.released, self.trimmed = 0, time.monotonic(), True, time.monotonic()
        self.cond = threading.Condition()
        self.stopping = False

    def wrap(self, generate):
        """``generate`` counted as activity (a request is busy from its call to its reply)."""
        def generate_counted(request: dict) -> dict:
            with self.cond:
                if not self.busy:
                    self.trimmed = time.monotonic()  # the first trim of a burst one period after it starts
                self.busy += 1
                self.released = False
                self.cond.notify_all()
            try:
                return generate(request)
            finally:
                with self.cond:
                    self.busy -= 1
                    self.last = time.monotonic()
                    self.cond.notify_all()
        return generate_counted

    def due(self) -> float | None:
        """Seconds until a release is due (0: now); None when there is nothing to release or a request runs."""
        if self.busy or self.released:
            return None
        return max(0.0, self.last + self.idle_s - time.monotonic())

    def release(self) -> None:
        self.model.shrink_kept(self.keep_tokens)

    def run(self) -> None:
        """Trim while busy and release whenever due, until ``stop()``: the body of a daemon thread."""
        while True:
            with self.cond:
                if self.stopping:
                    return
                due, action = self.due(), self.release
                if self.busy:
                    due, action = max(0.0, self.trimmed + self.trim_s - time.monotonic()), self.trim
                if due != 0:  # None: until a request starts or ends (notified)
                    self.cond.wait(due)
                    continue
                if action is self.trim:
                    self.trimmed = time.monotonic()
                else:
                    self.released = True
            action()

    def start(self) -> "IdleRelease":
        threading.Thread(target=self.run, name="ark-serve-idle-release", daemon=True).start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()


def check_port(host: str, port: int) -> None:
    """``UserError`` at once where ``host:port`` cannot be listened on (in use, not an address of this machine),
    not after the model has loaded."""
    import socket

    try:
        socket.create_server((host, port)).close()
    except (OSError, OverflowError) as e:
        raise UserError(f"cannot listen on {host}:{port}: {getattr(e, 'strerror', None) or e}") from None


# the request being answered: what ``streamed``'s check found in its body, read back by ``OpenAISurface``
REQUEST: contextvars.ContextVar[dict] = contextvars.ContextVar("ark_serve_request")


def streamed(check):
    """The server's request check (``body -> body``) taking OpenAI's ``stream`` and ``stream_options`` off the body
    first, validated, and noting them for ``OpenAISurface``: the model answers the rest of the request."""
    from pydantic import BaseModel, ConfigDict, ValidationError

    from ark.llm.schema import RequestError

    class StreamOptions(BaseModel):
        model_config = ConfigDict(extra="allow", strict=True)
        include_usage: bool = False

    class Streaming(BaseModel):
        model_config = ConfigDict(strict=True)
        stream: bool | None = None
        stream_options: StreamOptions | None = None

    def check_streamed(body):
        if not isinstance(body, dict):
            return check(body)
        try:
            asked = Streaming.model_validate({k: body[k] for k in ("stream", "stream_options") if k in body})
        except ValidationError as e:
            first = e.errors(include_url=False, include_input=False)[0]
            raise RequestError(400, f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        if asked.stream_options is not None and not asked.stream:
            raise RequestError(400, "stream_options: only allowed when stream is true")
        noted = REQUEST.get(None)
        if noted is not None:
            noted.update(stream=bool(asked.stream),
                         usage=bool(asked.stream and asked.stream_options and asked.stream_options.include_usage))
        return check({k: v for k, v in body.items() if k not in ("stream", "stream_options")})
    return check_streamed


def chunks(completion: dict, usage: bool) -> bytes:
    """A ``chat.completion`` as the server-sent events of a streamed one: the role and content, each tool call,
    the finish reason, the usage when asked for (``stream_options.include_usage``), ``[DONE]``."""
    head = {key: completion[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice["message"]
    calls = message.get("tool_calls") or []
    deltas = [{"role": "assistant", "content": message.get("content") if calls else message.get("content") or ""}]
    deltas += [{"tool_calls": [{"index": i, "id": call["id"], "type": "function", "function": call["function"]}]}
               for i, call in enumerate(calls)]
    events = [head | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    events.append(head | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    if usage:  # as OpenAI sends it: null on every chunk, the totals on one more with no choices
        events = [event | {"usage": None} for event in events] + [head | {"choices": [], "usage": completion["usage"]}]
    return b"".join(f"data: {json.dumps(event)}\n\n".encode() for event in events) + b"data: [DONE]\n\n"


class OpenAISurface:
    """The ASGI app ``ark serve`` runs around its chat server's: streaming, the legacy completions route refused,
    a log line per request (``log``, default stderr)."""

    def __init__(self, app, log=None):
        self.app = app
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"].rstrip("/")
        started, noted = time.monotonic(), {"stream": False, "usage": False}
        status, held = [0], []  # a chat reply is held whole: sent as it is, or as events
        chat = scope["method"] == "POST" and path.endswith("/chat/completions")

        async def forward(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                if chat and status[0] == 200:
                    return held.append(message)
            elif held:
                held.append(message)
                if message.get("more_body"):
                    return
                status[0], headers, body = self.reply(held, noted)
                await send({"type": "http.response.start", "status": status[0], "headers": headers})
                return await send({"type": "http.response.body", "body": body})
            await send(message)

        token = REQUEST.set(noted)
        try:
            if scope["method"] == "POST" and path.endswith("/completions") and not chat:
                status[0] = 404
                await self.send_error(scope, receive, send, 404, "ark serve answers chat completions only (the "
                                      "model is served with its chat template): POST /v1/chat/completions")
            else:
                await self.app(scope, receive, forward)
        finally:
            REQUEST.reset(token)
            tokens = noted.get("tokens")
            shown = json.dumps(scope["path"])[1:-1]  # ASCII, escaped: a path cannot forge a log line or a terminal code
            self.log(" ".join([time.strftime("%H:%M:%S"), scope["method"], shown, str(status[0]),
                               *([f"{tokens.get('prompt_tokens', 0)}+{tokens.get('completion_tokens', 0)} tokens"]
                                 if tokens else []), *(["streamed"] if noted["stream"] and tokens else []),
                               f"{(time.monotonic() - started) * 1000:.0f} ms"]))

    @staticmethod
    def reply(held: list[dict], noted: dict) -> tuple[int, list, bytes]:
        """(status, headers, body) for a chat reply held whole (its start message, then its body messages): as it
        is, or as events where the request asked for a stream; a 500 where it is not a completion."""
        body = b"".join(m.get("body", b"") for m in held[1:])
        try:
            completion = json.loads(body)
            noted["tokens"] = completion.get("usage") or {}
            if noted["stream"]:
                body = chunks(completion, noted["usage"])
                headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
            else:
                headers = [(k, v) for k, v in held[0]["headers"] if k.lower() != b"content-length"]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:  # the generator's bug, a 500
            from ark.llm.server import _error  # the server's own OpenAI error body

            noted["tokens"] = None
            error = _error(500, f"the model's reply is not a chat completion ({type(e).__name__}: {e})"[:300])
            return error.status_code, error.raw_headers, error.body
        return 200, headers + [(b"content-length", str(len(body)).encode())], body

    @staticmethod
    async def send_error(scope, receive, send, status: int, message: str):
        from ark.llm.server import _error  # the server's own OpenAI error body

        await _error(status, message)(scope, receive, send)


def openai_server(generate, check, log=None, **settings):
    """A ``ChatServer`` (not yet started) for clients of OpenAI's API: ``check`` sees requests with their streaming
    settings taken off (``streamed``), and its app runs inside ``OpenAISurface``."""
    from ark.llm.server import ChatServer

    chat = ChatServer(generate, check=streamed(check), **settings)
    chat.uvicorn.config.app = OpenAISurface(chat.uvicorn.config.app, log)  # uvicorn loads its app when it starts
    return chat


def server(overrides: list[str], host: str, port: int):
    """(the server, not yet started; the served backbone) for ``overrides`` (default: the
    embedded model, decoding as many requests together as a default run keeps in flight, each reply at most the
    backbone's ``max_tokens``)."""
    from ark import build
    from ark.agent.backbones import LocalBackbone
    from ark.llm.local import LocalChatModel
    from ark.llm.schema import check_chat_request

    fewer_heaps()
    check_port(host, port)
    cfg = served_config(overrides)
    spec = build.spec(cfg, "evaluate")
    backbone = spec.backbone
    if not isinstance(backbone, LocalBackbone):
        raise UserError(f"ark serve serves the embedded model or a student (backbone=local_smollm2, backbone=student "
                        f"or backbone.local.adapter=<dir>); backbone={backbone.name} is reached at its own address")
    backbone.check_files()
    name = served_name(backbone)
    model = LocalChatModel(**dataclasses.asdict(backbone.local), name=name, cache_dir=spec.paths.models,
                           threads=spec.cpu_threads)
    idle = IdleRelease(model)

    def on_exit():
        idle.stop()
        model.cancel()
        batcher = getattr(model, "batcher", None)
        if batcher is not None and batcher.steps:  # how many rows the requests filled, as a stage's log says it
            print(f"ark serve: batched decoding: {batcher.summary()}", file=sys.stderr, flush=True)

    try:
        chat = openai_server(idle.wrap(capped(model.generate, backbone.max_tokens)),
                             lambda body: model.check_size(check_chat_request(body, name)), host=host, port=port,
                             model_name=name, workers=max(backbone.local.decode_rows, in_flight(cfg)), max_queue=64,
                             keep_abandoned=True, on_exit=on_exit, **dataclasses.asdict(spec.llm.server))
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    idle.start()
    return chat, backbone


def serve(overrides: list[str], host: str = "127.0.0.1", port: int = 8000, ready=None, stop=None) -> None:
    """Serve until Ctrl-C (or until ``stop``, a ``threading.Event``, is set); ``ready(url, name)`` is called once
    the server listens (the default prints how to reach it)."""
    chat, backbone = server(overrides, host, port)
    with chat:
        (ready or (lambda url, name: print(usage(backbone, url), flush=True)))(chat.url, served_name(backbone))
        (stop or threading.Event()).wait()
