"""Run statistics over query records: tool use, steps, invalid calls, tokens, cost; and timings."""
from __future__ import annotations

from typing import TYPE_CHECKING

from collections import Counter

import numpy as np

from ark.llm.protocol import observation_text, parse_text_calls

if TYPE_CHECKING:
    from ark.agent.records import QueryRecord


def run_statistics(records: list[QueryRecord]) -> dict:
    """What the agents did (deterministic when replayed from the LLM cache)."""
    agents = [a for r in records for a in r.agents]
    if not agents:
        return {}
    calls = Counter()
    for a in agents:
        calls.update(a.tool_calls)
    n_calls = sum(calls.values())
    no_call = sum(a.replies_without_call for a in agents)
    invalid = sum(a.invalid_calls for a in agents)
    tokens = sum(a.prompt_tokens + a.completion_tokens for a in agents)
    n_q = len(records)
    return {
        "tool_call_share": {t: round(c / n_calls, 4) for t, c in sorted(calls.items())} if n_calls else {},
        "tool_calls_per_agent": round(n_calls / len(agents), 3),
        "steps_mean": round(float(np.mean([a.steps for a in agents])), 3),
        "finished_share": round(float(np.mean([a.finished for a in agents])), 4),
        "invalid_call_rate": round((invalid + no_call) / max(1, n_calls + no_call), 4),
        "tool_failures": int(sum(a.tool_failures for a in agents)),
        "prompt_tokens": int(sum(a.prompt_tokens for a in agents)),
        "completion_tokens": int(sum(a.completion_tokens for a in agents)),
        "tokens_per_query": round(tokens / n_q, 1),
        "cost_usd": round(sum(a.cost for a in agents), 6),
        "cost_per_query_usd": round(sum(a.cost for a in agents) / n_q, 6),
        "failed_llm_calls": int(sum(len(a.errors) for a in agents)),
        "context_full_share": round(float(np.mean([a.context_full for a in agents])), 4),
    }


def timing_statistics(records: list[QueryRecord]) -> dict:
    """Wall-clock time per query (its slowest agent, tools included) and model / tool time per agent."""
    wall = [r.wall_time for r in records if r.wall_time is not None]
    if not wall:
        return {}
    out = {"query_wall_p50_s": float(np.percentile(wall, 50)), "query_wall_p95_s": float(np.percentile(wall, 95)),
           "query_wall_mean_s": float(np.mean(wall))}
    agents = [a for r in records for a in r.agents]
    if agents:
        out["agent_model_time_p50_s"] = float(np.median([sum(a.model_time) for a in agents]))
        out["agent_tool_time_p50_s"] = float(np.median([sum(a.tool_time) for a in agents]))
    out = {k: round(v, 4) for k, v in out.items()}
    out["replayed_queries"] = sum(any(a.replayed_steps for a in r.agents) for r in records)
    return out


def steps(messages: list[dict]) -> list[tuple[dict, list[dict], list[str]]]:
    """(reply, its tool calls, the observations that answered it) per step of an agent's message list; calls are
    native or, in the text protocol, parsed from the reply's text."""
    out = []
    for m in messages[2:]:  # after the system prompt and the question
        if m["role"] == "assistant":
            out.append((m, m.get("tool_calls") or parse_text_calls(m.get("content")), []))
        elif out:
            reply, calls, observations = out[-1]
            text = m.get("content") or ""
            if m["role"] == "user" and len(observations) < len(calls):  # text protocol: drop its prefix
                text = text.removeprefix(observation_text(calls[len(observations)]["function"]["name"], ""))
            observations.append(text)
    return out
