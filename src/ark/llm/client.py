"""Every model call goes through here: litellm, an on-disk response cache, retries, accounting.

The cache key is the full request (model, messages, tools, tool choice, sampling parameters), the agent index
and the endpoint's identity (a local model's weights, adapter, dtype and decoding mode; a server's address),
so n stochastic agents stay distinct, another model or server never answers from this one's cache, and a
rerun replays exactly without calling the model. A replay
returns the stored tokens, cost and latency, so metrics of a replayed run equal the original's.
API keys are read from the environment variable a backbone names and passed to litellm only; they
are never part of a cache key, a record or a log line: every reply and error text is scrubbed of the keys the
run knows (``ark.secrets``) before it is cached or returned, in ``complete`` and nowhere else.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import asyncio
import hashlib
import json
import logging
import os
import random
import time
from dataclasses import asdict

import litellm

from ark.errors import UserError
from ark.llm.settings import RetryPolicy
from ark.llm.result import LLMResult
from ark.secrets import known_keys, scrub, scrub_urls

if TYPE_CHECKING:
    from ark.llm.cache import ResponseCache
    from ark.llm.settings import Backbone

log = logging.getLogger(__name__)
litellm.suppress_debug_info = True
for _name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "httpx"):  # one INFO line per call otherwise
    logging.getLogger(_name).setLevel(logging.WARNING)

RETRYABLE = (
    litellm.exceptions.RateLimitError,
    litellm.exceptions.InternalServerError,
    litellm.exceptions.ServiceUnavailableError,
    litellm.exceptions.Timeout,
    litellm.exceptions.APIConnectionError,
)


def served_model(api_base: str | None, backbone: Backbone, timeout: float = 10.0) -> dict:
    """What a self-served endpoint (an ``api_base``) says about the model it serves under the backbone's name: its
    ``/models`` entry's id and creation time, so that a server restarted with other weights under the same address
    and name is another endpoint. Nothing for a provider's own address (the model name is all there is)."""
    if not api_base:
        return {}
    import urllib.request

    name = backbone.model.split("/", 1)[1] if "/" in backbone.model else backbone.model
    key = os.environ.get(backbone.api_key_env) if backbone.api_key_env else None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(api_base.rstrip("/") + "/models", headers=headers),
                                    timeout=timeout) as r:
            listed = json.load(r).get("data") or []
    except Exception as e:  # noqa: BLE001  (an endpoint without /models: the address alone says what answers)
        log.warning("%s/models did not answer (%s): the cache tells this server's models apart by address and name "
                    "only", scrub_urls(api_base.rstrip("/")), type(e).__name__)
        return {"served": None}
    entry = next((m for m in listed if isinstance(m, dict) and m.get("id") == name), None)
    if entry is None:
        log.warning("%s/models does not list %r", scrub_urls(api_base.rstrip("/")), name)
    return {"served": None if entry is None else {"id": entry.get("id"), "created": entry.get("created")}}


def check_listening(api_base: str, timeout: float = 5.0) -> None:
    """One clear error, before a run writes anything, where nothing listens at a server's address (its connection is
    refused): every call would fail after its retries. Anything else (a slow or unknown host) is left to the calls."""
    import socket
    from urllib.parse import urlsplit

    try:
        url = urlsplit(api_base)
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:  # a port that is not a number: left to the calls, which say so
        return
    if url.scheme not in ("http", "https") or not url.hostname:
        return
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
    except ConnectionRefusedError:
        raise UserError(f"nothing answers at {scrub_urls(api_base)} (connection refused): start the server first (the "
                        "embedded model or a student: `ark serve`, which prints the run command), or point "
                        "backbone.api_base (or ARK_SERVE_URL) at one that runs") from None
    except OSError:
        pass


def request_key(request: dict) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class LLMClient:
    """``context_window`` and ``count_tokens(request)`` (a local model's exact count) default to litellm's model
    info and token counter; a request that would not fit with its longest reply is not sent (``context_full``)."""

    def __init__(self, backbone: Backbone, cache: ResponseCache | None = None, retry: RetryPolicy = RetryPolicy(),
                 api_base: str | None = None, endpoint_identity: dict | None = None,
                 context_window: int | None = None, count_tokens=None, cap=None):
        self.backbone = backbone
        self.cap = cap  # an ark.llm.spending.SpendingCap, or None
        self.prices = None  # (USD per input token, per output token): what a call is reserved at under a cap
        if cap is not None:
            from ark.llm.spending import token_prices, unpriced

            self.prices = token_prices(backbone.model, backbone.extra)
            if self.prices is None:
                raise UserError(unpriced(backbone.model))
        self.cache = cache
        self.retry = retry
        self.api_base = api_base or backbone.resolved_api_base()
        # what answers: a local model's identity (its loopback port changes every run), else the server's address
        # (given or from the environment) and what it says it serves
        self.endpoint = endpoint_identity if endpoint_identity is not None else \
            {"api_base": self.api_base, **served_model(self.api_base, backbone)}
        self.calls = 0  # model calls actually made (cache hits excluded)
        self.context_window = backbone.context_window or context_window or _litellm_window(backbone.model)
        self.count_tokens = count_tokens or (lambda req: litellm.token_counter(
            model=req["model"], messages=req["messages"], tools=req.get("tools")))

    def fits(self, req: dict) -> bool:
        """Whether the request's prompt plus ``max_tokens`` fits the context window (an unknown window: yes).
        Tokens are counted only when a byte count cannot tell: a token is at least one byte of the text."""
        if self.context_window is None:
            return True
        room = self.context_window - req["max_tokens"]
        text = json.dumps([req["messages"], req.get("tools")], ensure_ascii=False).encode()
        return len(text) + 64 * len(req["messages"]) + 1024 <= room or self.count_tokens(req) <= room

    def request(self, messages: list[dict], tools: list[dict] | None, seed: int) -> dict:
        b = self.backbone
        req = {"model": b.model, "messages": messages, "temperature": b.temperature, "max_tokens": b.max_tokens,
               "seed": seed, **b.extra}
        if b.top_p is not None:
            req["top_p"] = b.top_p
        if tools and b.tool_mode == "native":
            req["tools"] = tools
            req["tool_choice"] = b.tool_choice
        return req

    async def complete(self, messages: list[dict], tools: list[dict] | None, agent_index: int = 0,
                       seed: int = 0) -> LLMResult:
        req = self.request(messages, tools, seed)
        if not self.fits(req):
            return LLMResult(None, context_full=True)
        key = request_key({**req, "agent_index": agent_index, "endpoint": self.endpoint})
        secrets = known_keys(self.backbone.api_key_env)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                return _scrubbed(LLMResult(**{**hit, "cached": True}), secrets)
        held = None
        if self.cap is not None:  # reserved at its worst case first; a killed run's call stays counted so
            from ark.llm.spending import WAIT

            counted = self.count_tokens(req)
            # calls in flight may settle below their worst case, or measure the server's token count
            while (held := self.cap.reserve(self.cap.worst_cost(counted, req["max_tokens"], self.prices))) == WAIT:
                await asyncio.sleep(0.05)
            if isinstance(held, str):
                return LLMResult(None, error=held)
        result = _scrubbed(await self._call(req), secrets)
        if held is not None:
            self.cap.settle(held, self.real_cost(result), counted, result.prompt_tokens or 0)
        if self.cache is not None and result.error is None:
            self.cache.put(key, {k: v for k, v in asdict(result).items() if k != "cached"})
        return result

    def real_cost(self, result: LLMResult) -> float:
        """A reply's cost: litellm's, or from its token counts at the known prices where litellm priced it at 0."""
        if result.cost or self.prices is None:
            return result.cost
        return result.prompt_tokens * self.prices[0] + result.completion_tokens * self.prices[1]

    async def _call(self, req: dict) -> LLMResult:
        api_key = os.environ.get(self.backbone.api_key_env) if self.backbone.api_key_env else None
        if api_key is None and self.backbone.api_key_env and not self.api_base:
            # a provider's API without its key: found here, at the first call, not after retries
            return LLMResult(None, attempts=0, error=f"MissingKey: the environment variable "
                                                     f"{self.backbone.api_key_env} (backbone.api_key_env) is not set")
        if self.api_base and api_key is None:
            api_key = "none"  # OpenAI-compatible local servers want some key
        error = None
        for attempt in range(1, self.retry.max_attempts + 1):
            start = time.perf_counter()
            try:
                self.calls += 1
                resp = await litellm.acompletion(**req, api_base=self.api_base, api_key=api_key, num_retries=0,
                                                 timeout=self.retry.timeout)
                latency = time.perf_counter() - start
                return _result(resp, latency, attempt)
            except RETRYABLE as e:
                error = f"{type(e).__name__}: {_one_line(e)}"
                if attempt < self.retry.max_attempts:
                    delay = min(self.retry.max_delay, self.retry.base_delay * 2 ** (attempt - 1))
                    delay *= 0.5 + random.random() / 2
                    await asyncio.sleep(min(self.retry.max_delay, max(delay, _retry_after(e))))
            except Exception as e:  # bad request, auth, malformed response: retrying will not help
                return LLMResult(None, attempts=attempt, error=f"{type(e).__name__}: {_one_line(e)}")
        return LLMResult(None, attempts=self.retry.max_attempts, error=error)


def _retry_after(e: Exception) -> float:
    """Seconds the server asked to wait (a 429's or 503's Retry-After header in seconds), else 0."""
    headers = getattr(getattr(e, "response", None), "headers", None) or {}
    try:
        return max(0.0, float(headers.get("retry-after", 0)))
    except (TypeError, ValueError):  # an HTTP date: the backoff applies
        return 0.0


def _litellm_window(model: str) -> int | None:
    """The model's input limit in litellm's offline model map, None for a model it does not list."""
    try:
        return litellm.get_model_info(model).get("max_input_tokens")
    except Exception:  # litellm raises a bare Exception for unknown models
        return None


def _result(resp, latency: float, attempts: int) -> LLMResult:
    msg = resp.choices[0].message
    tool_calls = [
        {"id": tc.id, "type": "function", "function": {"name": tc.function.name, "arguments": tc.function.arguments}}
        for tc in (msg.tool_calls or [])
    ]
    message = {"role": "assistant", "content": msg.content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    usage = getattr(resp, "usage", None)
    # litellm prices every response it returns (None for a model missing from its price map: local, vLLM)
    hidden = getattr(resp, "_hidden_params", None)
    cost = float((hidden.get("response_cost") if isinstance(hidden, dict) else None) or 0.0)
    return LLMResult(message, prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                     completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                     cost=cost, latency=round(latency, 4), attempts=attempts)


def _one_line(e: Exception) -> str:
    return str(e).replace("\n", " ")


def _scrubbed(result: LLMResult, secrets: list[str]) -> LLMResult:
    """The result without a key the run knows in its message or error (some providers echo it back); the error
    cut to 300 characters after the scrub, so that no part of a key survives at the cut."""
    result.message = scrub(result.message, secrets)
    if result.error is not None:
        result.error = scrub(result.error, secrets)[:300]
    return result
