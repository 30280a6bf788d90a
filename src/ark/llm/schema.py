"""The OpenAI chat-completions request the local server accepts, declared once (pydantic) and checked before any
work: types and ranges as the OpenAI API reference gives them (temperature finite in [0, 2], top_p in (0, 1], an
integer seed that a generator takes, messages and tools of the documented shapes), and text that is valid Unicode.

``check_chat_request(body, served)`` returns the request as plain data, or raises ``RequestError`` (a 4xx with one
line saying which field and why). Fields the reference has and the local model ignores (``user``, ``logprobs``...)
pass; a field of a wrong type never reaches the model.
"""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError


class RequestError(Exception):
    """A client error: ``status`` (4xx), ``message`` one line, ``code`` OpenAI's error code."""

    def __init__(self, status: int, message: str, code: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def _unicode(text: str) -> str:
    """JSON may escape a lone UTF-16 surrogate (``"\\ud800"``): no tokenizer can encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds a lone surrogate (not valid Unicode)") from None
    return text


Text = Annotated[str, AfterValidator(_unicode)]
Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed takes


class _Open(BaseModel):
    """A part of the request: strict types (no "0.5" for 0.5, no true for 1), unknown fields let through."""

    model_config = ConfigDict(extra="allow", strict=True)


class TextPart(_Open):
    type: Literal["text"]
    text: Text


class FunctionCall(_Open):
    name: Name
    arguments: Text


class ToolCall(_Open):
    id: Text
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[TextPart] | None = None
    name: Text | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: Text | None = None


class Function(_Open):
    name: Name
    description: Text | None = None
    parameters: dict | None = None


class Tool(_Open):
    type: Literal["function"]
    function: Function


class NamedFunction(_Open):
    name: Name


class ToolChoice(_Open):
    type: Literal["function"]
    function: NamedFunction


class ChatRequest(_Open):
    model: Text | None = None
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoice | None = None
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: Literal[1] | None = None
    stream: Literal[False] | None = None  # the local model answers whole replies only


def _where(error: dict) -> str:
    """The field an error is about (``messages.0.content``), without pydantic's names for its validators."""
    return ".".join(str(part) for part in error["loc"] if "[" not in str(part)) or "the body"


def check_chat_request(body, served: str | None = None) -> dict:
    """``body`` (parsed JSON) as a valid chat request, or ``RequestError``: 400 for a malformed one, 404 for a model
    other than ``served`` (when given)."""
    if not isinstance(body, dict):
        raise RequestError(400, "the body must be a JSON object (a chat-completions request)")
    try:
        request = ChatRequest.model_validate(body)
    except ValidationError as e:
        first = e.errors(include_url=False, include_input=False)[0]
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise RequestError(400, f"{_where(first)}: {first['msg']}{more}"[:300]) from None
    if served is not None and request.model not in (None, served):
        raise RequestError(404, f"the model {request.model[:80]!r} is not served here; this server serves "
                                f"{served!r}", "model_not_found")
    return body
