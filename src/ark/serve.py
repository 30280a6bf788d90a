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


def usage(name: str, url: str, rows: int) -> str:
    """How to reach the server: a run, curl, the openai client, litellm."""
    return "\n".join([
        f"serving {name} at {url} (Ctrl-C stops it)",
        "a run against it (named after the served model):",
        f"  python -m ark.stages.evaluate backbone=qwen3-8b backbone.name={name} backbone.model=openai/{name} "
        f"backbone.api_base={url} backbone.api_key_env=null backbone.context_window=8192 backbone.extra={{}} "
        "eval.limit=5",
        f"  (it decodes up to {rows} requests together, agent.n_agents x eval.concurrency of a default run; with more "
        "in flight a reply waits longer and may pass llm.retry.timeout)",
        f"curl:    curl -s {url}/chat/completions -H 'Content-Type: application/json' "
        f"-d '{{\"model\": \"{name}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'",
        f"openai:  OpenAI(base_url=\"{url}\", api_key=\"none\").chat.completions.create(model=\"{name}\", ...)",
        f"litellm: litellm.completion(model=\"openai/{name}\", api_base=\"{url}\", api_key=\"none\", ...)",
    ])


def served_config(overrides: list[str]):
    """The config ``ark serve`` builds its model from: the embedded model unless a backbone is chosen, decoding a
    row for every request a default run keeps in flight (agent.n_agents x eval.concurrency) unless
    ``backbone.local.decode_rows`` is given."""
    from ark.config import compose

    keys = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    if "backbone" not in keys:
        overrides = ["backbone=local_smollm2", *overrides]
    cfg = compose(overrides)
    if "backbone.local.decode_rows" not in keys and "local" in cfg.backbone:
        cfg.backbone.local.decode_rows = cfg.agent.n_agents * cfg.eval.concurrency
    return cfg


def server(overrides: list[str], host: str, port: int):
    """(the server, not yet started; its model's name; its decoding rows) for ``overrides`` (default: the embedded
    model, decoding as many requests together as a default run keeps in flight)."""
    from ark import build
    from ark.agent.backbones import LocalBackbone
    from ark.llm.local import LocalChatModel
    from ark.llm.server import ChatServer

    spec = build.spec(served_config(overrides), "evaluate")
    backbone = spec.backbone
    if not isinstance(backbone, LocalBackbone):
        raise UserError(f"ark serve serves the embedded model or a student (backbone=local_smollm2, backbone=student "
                        f"or backbone.local.adapter=<dir>); backbone={backbone.name} is reached at its own address")
    backbone.check_files()
    name = served_name(backbone)
    model = LocalChatModel(**dataclasses.asdict(backbone.local), name=name, cache_dir=spec.paths.models,
                           threads=spec.cpu_threads)
    try:
        chat = ChatServer(model.generate, host=host, port=port, model_name=name, workers=backbone.local.decode_rows,
                          max_queue=64, keep_abandoned=True, **dataclasses.asdict(spec.llm.server))
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return chat, name, backbone.local.decode_rows


def serve(overrides: list[str], host: str = "127.0.0.1", port: int = 8000, ready=None, stop=None) -> None:
    """Serve until Ctrl-C (or until ``stop``, a ``threading.Event``, is set); ``ready(url, name)`` is called once
    the server listens (the default prints how to reach it)."""
    chat, name, rows = server(overrides, host, port)
    with chat:
        (ready or (lambda url, n: print(usage(n, url, rows), flush=True)))(chat.url, name)
        (stop or threading.Event()).wait()
