"""The record schema (DESIGN §4.4), one home for the loop, the runner, the stages, analyses and SFT data.

``records.jsonl`` holds one ``QueryRecord`` per line: the query, every agent's ``Trajectory`` and the fused
ranking. How long it took, and which steps were replayed from the LLM cache, go to ``timings.jsonl`` beside it
(``split_timings``): they differ between two computations of the same result. Nothing derived from gold labels is
in either: per-query scores go to ``scores.jsonl``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass
class Trajectory:
    """One agent's run on one query."""

    agent: int
    messages: list[dict]  # OpenAI chat format, tool calls and results included
    answer: list[int] = field(default_factory=list)
    steps: int = 0
    finished: bool = False
    model_time: list[float] = field(default_factory=list)  # seconds per step (replayed from the LLM cache)
    tool_time: list[float] = field(default_factory=list)  # seconds per step spent in the tools
    tokens: list[list[int]] = field(default_factory=list)  # [prompt, completion] per step
    cost: float = 0.0
    tool_calls: dict[str, int] = field(default_factory=dict)
    invalid_calls: int = 0  # tool calls answered with an error observation (bad call or a failing tool)
    tool_failures: int = 0  # of which the tool itself raised
    replies_without_call: int = 0
    errors: list[str] = field(default_factory=list)  # model calls that failed after their retries
    replayed_steps: int = 0  # steps answered from the LLM cache (their model time is the recorded one)
    context_full: bool = False  # ended because the next request would not fit the backbone's context window
    idle_stop: bool = False  # ended after ``idle_limit`` replies in a row without a valid tool call

    @property
    def prompt_tokens(self) -> int:
        return sum(t[0] for t in self.tokens)

    @property
    def completion_tokens(self) -> int:
        return sum(t[1] for t in self.tokens)

    @classmethod
    def from_dict(cls, d: dict) -> "Trajectory":
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass
class QueryRecord:
    """One query of a run: its agents and the fused ranking (baselines: no agents, ranking scores)."""

    id: str
    query: str
    ranking: list[int]
    agents: list[Trajectory] = field(default_factory=list)
    ranking_scores: list[float] | None = None  # retrieval scores of a baseline's ranking
    wall_time: float | None = None  # seconds from the query's start to its slowest agent's end (``runner``); None:
    # not known here (a run directory restored by DVC without its timings.jsonl)

    @property
    def complete(self) -> bool:
        """Every agent ran without a failed model call."""
        return not any(a.errors for a in self.agents)

    def to_dict(self) -> dict:
        # field by field, sharing the messages rather than deep-copying them (dataclasses.asdict): a record is
        # written as it is, and the copy was a tenth of a rules run's time
        d = {**_fields(self), "agents": [_fields(a) for a in self.agents]}
        if d["ranking_scores"] is None:
            del d["ranking_scores"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "QueryRecord":
        known = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in d.items() if k in known},
                      "agents": [Trajectory.from_dict(a) for a in d.get("agents", [])]})


def _fields(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


AGENT_TIMINGS = ("model_time", "tool_time", "replayed_steps")  # how a trajectory was computed, not what it is
QUERY_TIMINGS = ("wall_time",)


def split_timings(d: dict) -> tuple[dict, dict]:
    """A record's dict (``to_dict``) -> (the record without its timings, its timings keyed by query id)."""
    timings = {"id": d["id"], **{k: d[k] for k in QUERY_TIMINGS if k in d},
               "agents": [{k: a[k] for k in AGENT_TIMINGS if k in a} for a in d.get("agents", [])]}
    record = {k: v for k, v in d.items() if k not in QUERY_TIMINGS}
    record["agents"] = [{k: v for k, v in a.items() if k not in AGENT_TIMINGS} for a in d.get("agents", [])]
    return record, timings


def join_timings(d: dict, timings: dict | None) -> dict:
    """A record's dict without timings, with ``timings`` (``split_timings``) put back; without them, it keeps the
    times it holds (a record written before the split) or none."""
    if not timings or len(timings.get("agents", [])) != len(d.get("agents", [])):
        return d
    return {**d, **{k: timings[k] for k in QUERY_TIMINGS if k in timings},
            "agents": [{**a, **t} for a, t in zip(d.get("agents", []), timings["agents"])]}
