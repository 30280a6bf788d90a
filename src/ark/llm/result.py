"""The reply of one model call, as policies and the agent loop see it (no litellm import here)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LLMResult:
    message: dict | None  # the assistant message (role, content, tool_calls), None when the call failed
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    latency: float = 0.0
    attempts: int = 0
    cached: bool = False
    error: str | None = None
    context_full: bool = False  # no call made: the request and its longest reply would not fit the context window
