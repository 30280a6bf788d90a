"""The backbones an agent runs on, one class per kind. ``conf/backbone/<name>.yaml`` names its class in
``_target_`` and holds its fields; ``ark.build.backbone`` instantiates it, and a key the class does not have is
an error. ``backbone.policy(tools, seed, serving)`` is the policy for the duration of a block (its sessions are told the
agent's step budget, ``policy.session(query, agent, T_max)``).

Adding a hosted model is one YAML with ``_target_: ark.agent.backbones.HostedBackbone``; adding a kind of backbone
is one class here with a ``policy`` context manager.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ark.agent.policies import ANSWER_ORDERS, LLMPolicy, RulesPolicy
from ark.errors import UserError
from ark.llm.settings import Backbone, RetryPolicy
from ark.secrets import scrub_urls
from ark.settings import check_choice, check_int, check_number


@dataclass(frozen=True)
class Serving:
    """How this machine reaches models (none of it changes a reply): the response cache (and a merged one read
    after it), retries, where model files are kept, torch threads, and how many agents can be in flight at once."""

    cache: str | None = None
    cache_base: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    models_dir: str | None = None
    threads: int | None = None
    agents_in_flight: int = 8
    server: dict = field(default_factory=dict)  # the embedded server's limits (llm.server: ark.llm.server.ChatServer)
    caps: tuple = ()  # spending caps on hosted calls: (ledger file, USD, name) (ark.build.spending_caps)
    run: str = ""  # the run the calls are for (its name in a shared spend ledger)


@dataclass(frozen=True)
class RulesBackbone:
    """The label-free scripted policy (``ark.agent.policies.RulesPolicy``): a baseline and the offline teacher."""

    name: str
    type_words: dict
    kind: ClassVar[str] = "rules"  # a label stored in each run's identity (ark.runs.identity.plain)
    search_size: int = 10
    expand: int = 2
    max_answer: int = 20
    temperature: float = 0.0
    answer_order: str = "ranked"
    findings: int = 0
    via: dict = field(default_factory=dict)
    bridge: int = 5
    vote_weight: float = 0.5
    text_protocol: ClassVar[bool] = False
    one_process: ClassVar[bool] = False  # False: worker processes may each run it
    priced: ClassVar[bool] = False  # its calls cost money: a spending cap needs its price
    uses_cache: ClassVar[bool] = False  # its replies go through the LLM response cache
    served: ClassVar[bool] = False  # it answers from a server it names (part of a run's identity: ``endpoint``)

    def check_files(self) -> None:
        """The files it reads besides the run's data, checked before any work."""

    @property
    def caveat(self) -> str | None:
        """What a user should know before reading its answers (``ark ask`` prints it)."""
        return "the rules backbone is a scripted policy, not a language model"

    def __post_init__(self):
        check_int("backbone.search_size", self.search_size)
        check_int("backbone.max_answer", self.max_answer)
        for name in ("expand", "findings", "bridge"):
            check_int(f"backbone.{name}", getattr(self, name), least=0)
        check_number("backbone.temperature", self.temperature)
        check_number("backbone.vote_weight", self.vote_weight)
        check_choice("backbone.answer_order", self.answer_order, ANSWER_ORDERS)

    @contextlib.contextmanager
    def policy(self, tools, seed: int, serving: Serving):
        from ark.tools.ark_v1 import ArkV1Toolbox

        if isinstance(tools, ArkV1Toolbox):  # ARK-V1's tools: its own scripted policy
            from ark.agent.rules_v1 import RulesV1Policy

            if self.temperature:
                raise UserError(f"backbone {self.name}: the scripted ARK-V1 policy is deterministic; use a rules "
                                "backbone with temperature 0 (backbone=rules)")
            yield RulesV1Policy(tools, self.type_words, self.search_size, self.expand, self.max_answer)
            return
        yield RulesPolicy(tools, self.type_words, self.search_size, self.expand, self.max_answer,
                          temperature=self.temperature, seed=seed, answer_order=self.answer_order,
                          findings=self.findings, via=self.via, bridge=self.bridge,
                          vote_weight=self.vote_weight)


@dataclass
class HostedBackbone(Backbone):
    """A model behind an API that litellm reaches (OpenAI, Anthropic, a vLLM server, ...)."""

    kind: ClassVar[str] = "litellm"
    one_process: ClassVar[bool] = False
    caveat: ClassVar[str | None] = None
    priced: ClassVar[bool] = True
    uses_cache: ClassVar[bool] = True
    served: ClassVar[bool] = True

    def endpoint(self) -> str | None:
        """The server its calls go to (``api_base``, else the provider's base URL from the environment; None: the
        provider's own address), without credentials."""
        endpoint = self.resolved_api_base()
        return endpoint and scrub_urls(endpoint)

    def check_files(self) -> None:
        api_base = self.resolved_api_base()
        if api_base:  # a server of one's own (a provider's address is theirs to keep up)
            from ark.llm.client import check_listening

            check_listening(api_base)

    @property
    def text_protocol(self) -> bool:
        return self.tool_mode == "text"

    def client(self, serving: Serving, api_base: str | None = None, local_model=None):
        """The ``ark.llm.client.LLMClient`` of this backbone (litellm is imported here, not by a rules run)."""
        from ark.llm.cache import ResponseCache
        from ark.llm.client import LLMClient

        cache = ResponseCache(serving.cache, serving.cache_base) if serving.cache else None
        cap = None
        if serving.caps and local_model is None:  # the embedded model costs nothing
            from ark.llm.spending import Ledger, SpendingCap

            cap = SpendingCap(serving.run, [(Ledger(path), usd, name) for path, usd, name in serving.caps])
        retry = serving.retry if local_model is None else dataclasses.replace(
            serving.retry, timeout=serving.retry.local_timeout)
        local = {} if local_model is None else dict(
            endpoint_identity=local_model.identity, context_window=local_model.context_window,
            count_tokens=lambda req: len(local_model.encode(local_model.render(req))))
        return LLMClient(self, cache, retry, api_base=api_base, cap=cap, **local)

    @contextlib.contextmanager
    def policy(self, tools, seed: int, serving: Serving):
        yield LLMPolicy(self.client(serving), tools, seed)


@dataclass(frozen=True)
class LocalModel:
    """The embedded model's settings: grammar-constrained decoding, dtype (auto: bfloat16 where the CPU has it
    natively), a LoRA adapter directory loaded on top (the distilled student), the rows of a batched decoding
    step (``ark.llm.batching``: concurrent requests share forward passes; 1: one request at a time), and the
    memory the key/values of the requests in flight and of the kept prompts share (``ark.llm.local.KVBudget``)."""

    constrained: bool = True
    dtype: str = "auto"
    adapter: str | None = None
    decode_rows: int = 1
    kv_memory_mb: int = field(default=1024, metadata={"identity": False})  # how much at once, not what: no identity
    linear: str = "onednn"
    # the linear layers: oneDNN with weights reordered once, or torch's own (ark.llm.weights.pack_linears)
    LINEAR_KERNELS: ClassVar[tuple[str, ...]] = ("onednn", "torch")

    def __post_init__(self):
        check_int("backbone.local.decode_rows", self.decode_rows)
        check_int("backbone.local.kv_memory_mb", self.kv_memory_mb)
        check_choice("backbone.local.linear", self.linear, self.LINEAR_KERNELS)


@dataclass
class LocalBackbone(HostedBackbone):
    """The embedded model (``ark.llm.local``) behind a loopback OpenAI-compatible server that lives as long as the
    policy does; litellm reaches it like any hosted model."""

    kind: ClassVar[str] = "local"
    local: LocalModel = field(default_factory=LocalModel)
    one_process: ClassVar[bool] = True  # it computes in this process: a worker would load its own copy
    priced: ClassVar[bool] = False  # the embedded model costs nothing
    served: ClassVar[bool] = False  # its loopback server lives as long as the policy: not a setting

    def check_files(self) -> None:
        if self.local.adapter and not Path(self.local.adapter).is_dir():
            raise UserError(f"backbone.local.adapter: no adapter directory at {self.local.adapter}")

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.local, dict):
            self.local = LocalModel(**self.local)

    @property
    def caveat(self) -> str | None:
        if self.local.adapter:
            return f"a LoRA student ({self.local.adapter}) of the embedded 135M-parameter model"
        return ("the embedded SmolLM2-135M runs every code path offline; it is far too small to answer well "
                "(a hosted or vLLM backbone answers for real: README, 'A real model')")

    @contextlib.contextmanager
    def policy(self, tools, seed: int, serving: Serving):
        from ark.llm.local import LocalChatModel
        from ark.llm.server import ChatServer

        model = LocalChatModel(**dataclasses.asdict(self.local), cache_dir=serving.models_dir,
                               threads=serving.threads)
        # as many generations at once as a decoding step has rows (one at a time without batching); every agent in
        # flight has one request outstanding, so a queue of twice that never turns one away (a request whose client
        # timed out leaves the queue uncomputed, or its reply answers the retry)
        with ChatServer(model.generate, model_name=self.model.split("/", 1)[-1], workers=self.local.decode_rows,
                        max_queue=max(16, 2 * serving.agents_in_flight), keep_abandoned=True, on_exit=model.cancel,
                        **serving.server) as server:
            yield LLMPolicy(self.client(serving, server.url, model), tools, seed)
        if model.batcher is not None:
            logging.getLogger(__name__).info("batched decoding: %s", model.batcher.summary())
