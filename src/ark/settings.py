"""Typed settings: the groups of the config a run reads, each a dataclass that checks its own values when it is made
(one ``UserError`` line naming the key), and the checks every settings class uses (the backbones in
``ark.agent.backbones`` and ``ark.llm.settings``, the retry policy). ``ark.build.spec`` makes them from the
composed config before any work, so a bad value never starts a run."""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields

from ark.errors import UserError

AGGREGATIONS = ("voting", "ordering", "random")  # agent.aggregation (ark.agent.aggregate has their functions)
PROMPTS = ("ark", "minimal")  # prompt.name (ark.agent.prompt writes them)


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(key: str, value, least: int = 1, none: bool = False) -> None:
    if none and value is None:
        return
    if not is_int(value) or value < least:
        raise UserError(f"{key} must be {'null or ' if none else ''}an integer >= {least}, got {value!r}")


def check_number(key: str, value, least: float = 0.0, most: float | None = None, above: bool = False,
                 none: bool = False, unit: str = "") -> None:
    """A finite number >= ``least`` (> with ``above``) and <= ``most``; nan and inf are refused (a cap of nan is
    no cap)."""
    if none and value is None:
        return
    ok = (is_number(value) and math.isfinite(value)
          and (value > least if above else value >= least) and (most is None or value <= most))
    if not ok:
        bounds = f"{'>' if above else '>='} {least:g}" + (f" and <= {most:g}" if most is not None else "")
        raise UserError(f"{key} must be {'null or ' if none else ''}a finite number {bounds}{unit}, got {value!r}")


def check_bool(key: str, value) -> None:
    if not isinstance(value, bool):
        raise UserError(f"{key} must be true or false, got {value!r}")


def check_choice(key: str, value, choices) -> None:
    if value not in choices:
        raise UserError(f"{key} must be one of {', '.join(map(str, choices))}, got {value!r}")


def from_mapping(cls, group: str, values: dict):
    """``cls(**values)``; a key ``cls`` has no field for, or a required one that is missing, is one error line."""
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise UserError(f"{group} has no setting {', '.join(unknown)} (its settings: {', '.join(known)})")
    missing = [f"{group}.{f.name}" for f in fields(cls) if f.name not in values
               and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise UserError(f"{', '.join(missing)}: missing from the config (removed by an override?); every run needs "
                        "a value")
    return cls(**values)


@dataclass(frozen=True)
class Limits:
    """Refused above these: runaway input, not a real run (``limits``)."""

    query_chars: int
    n_agents: int
    T_max: int

    def __post_init__(self):
        for f in fields(self):
            check_int(f"limits.{f.name}", getattr(self, f.name))


@dataclass(frozen=True)
class AgentSettings:
    """How the agents run a query (``agent``): steps, how many, how their lists are fused, the tools' sizes."""

    T_max: int
    n_agents: int
    aggregation: str
    global_k: int
    global_k_max: int
    neighbor_k: int
    idle_limit: int | None = None
    toolset: str = "ark"  # which tools (ark.build.toolbox)

    def __post_init__(self):
        for name in ("T_max", "n_agents", "global_k", "global_k_max", "neighbor_k"):
            check_int(f"agent.{name}", getattr(self, name))
        check_int("agent.idle_limit", self.idle_limit, none=True)
        check_choice("agent.aggregation", self.aggregation, AGGREGATIONS)
        if self.global_k > self.global_k_max:
            raise UserError(f"agent.global_k={self.global_k} (a search's default size) is over agent.global_k_max="
                            f"{self.global_k_max} (its largest)")

    def check_limits(self, limits: Limits) -> None:
        for name in ("T_max", "n_agents"):
            if getattr(self, name) > getattr(limits, name):
                raise UserError(f"agent.{name}={getattr(self, name)} is over limits.{name}={getattr(limits, name)}; "
                                f"raise limits.{name} if you mean it")


@dataclass(frozen=True)
class EvalSettings:
    """How a run is carried out (``eval``): which queries (``limit``), how many at once, what ends it."""

    limit: int | None
    concurrency: int
    workers: int
    progress: bool
    allow_incomplete: bool
    max_cost_usd: float | None = None
    spend_ledger: str | None = None
    max_total_cost_usd: float | None = None

    def __post_init__(self):
        check_int("eval.limit", self.limit, least=0, none=True)
        check_int("eval.concurrency", self.concurrency)
        check_int("eval.workers", self.workers)
        check_bool("eval.progress", self.progress)
        check_bool("eval.allow_incomplete", self.allow_incomplete)
        for name in ("max_cost_usd", "max_total_cost_usd"):
            check_number(f"eval.{name}", getattr(self, name), none=True, unit=" (US dollars)")
        if self.max_total_cost_usd is not None and not self.spend_ledger:
            raise UserError("eval.max_total_cost_usd needs eval.spend_ledger: the file that sums the runs' spend")
