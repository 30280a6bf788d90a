"""What an LLM client is configured with: the backbone's model and sampling settings, and its retry policy.
Plain data, no litellm: a run that never calls a model (the rules policy) imports neither."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RetryPolicy:
    max_attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 30.0
    timeout: float = 120.0
    local_timeout: float = 3600.0  # the embedded model: one slow CPU generation is not a failure to retry


@dataclass
class Backbone:
    """An LLM backbone's model and sampling settings (``ark.agent.backbones`` adds how it is served)."""

    name: str
    model: str  # litellm model id, e.g. gpt-4.1, anthropic/claude-sonnet-4-5, openai/<served name>
    api_base: str | None = None
    api_key_env: str | None = None
    temperature: float = 0.7
    top_p: float | None = None
    max_tokens: int = 1024
    tool_mode: str = "native"  # native tool calls, or "text": tools described in the prompt, calls parsed
    tool_choice: str = "auto"  # "required" where the provider supports it: every reply is a tool call
    extra: dict = field(default_factory=dict)  # passed through to litellm (e.g. vLLM chat_template_kwargs)
    context_window: int | None = None  # tokens, prompt and reply; null: the local model's, or litellm's model info
