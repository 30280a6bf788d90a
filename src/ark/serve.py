"""``ark serve [overrides]``: the embedded model, or a distilled student, as an OpenAI-compatible server.

The same model and server a stage starts on loopback for ``backbone=local_smollm2`` or ``backbone=student``
(``ark.llm.local``, ``ark.llm.server``: ``GET /v1/models``, ``POST /v1/chat/completions`` with tools, and the
server's limits against misbehaving clients, ``llm.server``), here kept up until Ctrl-C so that another tool, a
script or another clone's run can reach it by URL.
"""
from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

from ark.errors import UserError


def served_name(backbone) -> str:
    """What ``/v1/models`` calls the model: the embedded model's name, and the adapter's directory for a student."""
    name = backbone.model.split("/", 1)[-1]
    return f"{name}-{Path(backbone.local.adapter).name}" if backbone.local.adapter else name


def run_command(backbone, url: str) -> str:
    """The evaluation that ``ark serve`` prints: ``backbone=served`` (conf/backbone/served.yaml) named after the
    served model, with the served backbone's sampling where it differs from that file's, and its URL where it is
    not the file's default."""
    from omegaconf import OmegaConf

    from ark.config import CONF

    name = served_name(backbone)
    words = ["python -m ark.stages.evaluate backbone=served", f"backbone.name={name}", f"backbone.model=openai/{name}"]
    default = OmegaConf.load(CONF / "backbone" / "served.yaml")
    if url != default.api_base:
        words.append(f"backbone.api_base={url}")
    words += [f"backbone.{key}={getattr(backbone, key)}" for key in ("temperature", "top_p", "max_tokens")
              if getattr(backbone, key) != default.get(key)]
    return " ".join([*words, "eval.limit=5"])


def usage(backbone, url: str) -> str:
    """How to reach the server: a run, curl, the openai client, litellm."""
    name = served_name(backbone)
    return "\n".join([
        f"serving {name} at {url} (Ctrl-C stops it)",
        "a run against it (named after the served model):",
        f"  {run_command(backbone, url)}",
        f"  (it decodes up to {backbone.local.decode_rows} requests a step, backbone.local.decode_rows; a reply is "
        f"at most {backbone.max_tokens} tokens, backbone.max_tokens)",
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


def check_port(host: str, port: int) -> None:
    """``UserError`` at once where ``host:port`` cannot be listened on (in use, not an address of this machine),
    not after the model has loaded."""
    import socket

    try:
        socket.create_server((host, port)).close()
    except (OSError, OverflowError) as e:
        raise UserError(f"cannot listen on {host}:{port}: {getattr(e, 'strerror', None) or e}") from None


def server(overrides: list[str], host: str, port: int):
    """(the server, not yet started; the served backbone) for ``overrides`` (default: the
    embedded model, decoding as many requests together as a default run keeps in flight, each reply at most the
    backbone's ``max_tokens``)."""
    from ark import build
    from ark.agent.backbones import LocalBackbone
    from ark.llm.local import LocalChatModel
    from ark.llm.schema import check_chat_request
    from ark.llm.server import ChatServer

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
    try:
        chat = ChatServer(capped(model.generate, backbone.max_tokens), host=host, port=port, model_name=name,
                          workers=max(backbone.local.decode_rows, in_flight(cfg)), max_queue=64, keep_abandoned=True,
                          on_exit=model.cancel, check=lambda body: model.check_size(check_chat_request(body, name)),
                          **dataclasses.asdict(spec.llm.server))
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return chat, backbone


def serve(overrides: list[str], host: str = "127.0.0.1", port: int = 8000, ready=None, stop=None) -> None:
    """Serve until Ctrl-C (or until ``stop``, a ``threading.Event``, is set); ``ready(url, name)`` is called once
    the server listens (the default prints how to reach it)."""
    chat, backbone = server(overrides, host, port)
    with chat:
        (ready or (lambda url, name: print(usage(backbone, url), flush=True)))(chat.url, served_name(backbone))
        (stop or threading.Event()).wait()
