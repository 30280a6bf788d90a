"""What an LLM client is configured with: the backbone's model and sampling settings, and its retry policy.
Plain data, no litellm: a run that never calls a model (the rules policy) imports neither."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ark.config import CLIENT_ARGUMENTS, client_argument
from ark.errors import UserError
from ark.secrets import scrub_urls
from ark.settings import check_choice, check_int, check_number

# where litellm finds a provider's base URL when a call names none (its default address when unset)
BASE_URL_ENV = {"openai": ("OPENAI_BASE_URL", "OPENAI_API_BASE"), "anthropic": ("ANTHROPIC_BASE_URL",
                "ANTHROPIC_API_BASE"), "azure": ("AZURE_API_BASE",), "hosted_vllm": ("HOSTED_VLLM_API_BASE",)}


def provider_of(model: str) -> str:
    """litellm's provider of a model id: its prefix (``openai/...``), else OpenAI's or Anthropic's model names."""
    head, sep, _ = model.partition("/")
    if sep:
        return head
    return "anthropic" if model.startswith("claude") else "openai"


def resolved_api_base(model: str, api_base: str | None, environ=None) -> str | None:
    """The server a backbone's calls go to: ``api_base``, else the provider's base URL from the environment (what
    litellm reads), else None: the provider's own address."""
    if api_base:
        return api_base
    environ = os.environ if environ is None else environ
    provider = provider_of(model)
    return next((environ[v] for v in BASE_URL_ENV.get(provider, (f"{provider.upper()}_API_BASE",)) if environ.get(v)),
                None)


TOOL_MODES = ("native", "text")  # native tool calls, or tools described in the prompt and calls parsed from text
TOOL_CHOICES = (None, "auto", "required")  # OpenAI's tool_choice with tool_mode native (None: the server's default)
HOW_REACHED = {"identity": False}  # field metadata: how this machine reaches a server, not part of a run's identity


@dataclass
class RetryPolicy:
    max_attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 30.0
    timeout: float = 120.0
    local_timeout: float = 3600.0  # the embedded model: one slow CPU generation is not a failure to retry

    def __post_init__(self):
        check_int("llm.retry.max_attempts", self.max_attempts)
        for name in ("base_delay", "max_delay"):
            check_number(f"llm.retry.{name}", getattr(self, name), unit=" (seconds)")
        for name in ("timeout", "local_timeout"):
            check_number(f"llm.retry.{name}", getattr(self, name), above=True, unit=" (seconds)")

    def failure(self, error: str) -> str:
        """A failed model call's error (``LLMResult.error``) worded with how many attempts it took and what to
        change: a missing key made none; a timeout names the settings that trade waiting against load."""
        if error.startswith("MissingKey"):
            return f"no call was made: {error[len('MissingKey: '):]}"
        if error.startswith(("Timeout", "APITimeoutError")):
            return (f"calls timed out after llm.retry.timeout={self.timeout:g} s, {self.max_attempts} attempts "
                    f"({error[:120]}); a busy server answers slower the more requests are in flight: lower "
                    "eval.concurrency (or agent.n_agents) or raise llm.retry.timeout")
        return f"failed after {self.max_attempts} attempts: {error}"


@dataclass
class Backbone:
    """An LLM backbone's model and sampling settings (``ark.agent.backbones`` adds how it is served)."""

    name: str
    model: str  # litellm model id, e.g. gpt-4.1, anthropic/claude-sonnet-4-5, openai/<served name>
    api_base: str | None = field(default=None, metadata=HOW_REACHED)  # the server: identity by ``endpoint()``
    api_key_env: str | None = field(default=None, metadata=HOW_REACHED)
    temperature: float = 0.7
    top_p: float | None = None
    max_tokens: int = 1024
    tool_mode: str = "native"  # native tool calls, or "text": tools described in the prompt, calls parsed
    tool_choice: str = "auto"  # "required" where the provider supports it: every reply is a tool call
    extra: dict = field(default_factory=dict)  # passed through to litellm (e.g. vLLM chat_template_kwargs)
    context_window: int | None = None  # tokens, prompt and reply; null: the local model's, or litellm's model info

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model.strip():
            raise UserError(f"backbone.model must name a model (a litellm model id), got {self.model!r}")
        if self.api_base is not None and (not isinstance(self.api_base, str)
                                          or not self.api_base.startswith(("http://", "https://"))):
            raise UserError("backbone.api_base must be null or an http(s):// URL")  # the value may hold a key
        if self.api_base is not None and scrub_urls(self.api_base) != self.api_base:
            raise UserError("backbone.api_base carries a credential (user:password@ or a key in its query), which "
                            "litellm does not send as one: give the server's plain URL and the key in the "
                            "environment variable backbone.api_key_env names")  # the value itself is not echoed
        check_number("backbone.temperature", self.temperature, none=True)
        check_number("backbone.top_p", self.top_p, most=1.0, above=True, none=True)
        check_int("backbone.max_tokens", self.max_tokens)
        check_choice("backbone.tool_mode", self.tool_mode, TOOL_MODES)
        check_choice("backbone.tool_choice", self.tool_choice, TOOL_CHOICES)
        check_int("backbone.context_window", self.context_window, none=True)
        if not isinstance(self.extra, dict):
            raise UserError("backbone.extra must be a mapping of keyword arguments for litellm")
        taken = sorted(set(self.extra) & set(CLIENT_ARGUMENTS))
        if taken:
            raise UserError(client_argument(taken[0]))

    def resolved_api_base(self, environ=None) -> str | None:
        return resolved_api_base(self.model, self.api_base, environ)
