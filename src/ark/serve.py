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


def usage(name: str, url: str) -> str:
    """How to reach the server: a run, curl, the openai client, litellm."""
    return "\n".join([
        f"serving {name} at {url} (Ctrl-C stops it)",
        "a run against it (named after the served model):",
        f"  python -m ark.stages.evaluate backbone=qwen3-8b backbone.name={name} backbone.model=openai/{name} "
        f"backbone.api_base={url} backbone.api_key_env=null backbone.context_window=8192 backbone.extra={{}} "
        "agent.n_agents=1 eval.concurrency=1 eval.limit=5",
        "  (one model answers one request at a time on a CPU, hence one agent and one query at a time: with more in "
        "flight a reply can wait past llm.retry.timeout)",
        f"curl:    curl -s {url}/chat/completions -H 'Content-Type: application/json' "
        f"-d '{{\"model\": \"{name}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'",
        f"openai:  OpenAI(base_url=\"{url}\", api_key=\"none\").chat.completions.create(model=\"{name}\", ...)",
        f"litellm: litellm.completion(model=\"openai/{name}\", api_base=\"{url}\", api_key=\"none\", ...)",
    ])


def server(overrides: list[str], host: str, port: int):
    """(the server, not yet started; its model's name) for ``overrides`` (default: the embedded model)."""
    from ark import build
    from ark.agent.backbones import LocalBackbone
    from ark.config import compose
    from ark.llm.local import LocalChatModel
    from ark.llm.server import ChatServer

    if not any(o.split("=", 1)[0].lstrip("+~") == "backbone" for o in overrides):
        overrides = ["backbone=local_smollm2", *overrides]
    spec = build.spec(compose(overrides), "evaluate")
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
    return chat, name


def serve(overrides: list[str], host: str = "127.0.0.1", port: int = 8000, ready=None, stop=None) -> None:
    """Serve until Ctrl-C (or until ``stop``, a ``threading.Event``, is set); ``ready(url, name)`` is called once
    the server listens (the default prints how to reach it)."""
    chat, name = server(overrides, host, port)
    with chat:
        (ready or (lambda url, n: print(usage(n, url), flush=True)))(chat.url, name)
        (stop or threading.Event()).wait()
