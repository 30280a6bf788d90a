"""Run statistics over agent records: tool use, steps, invalid calls, tokens, cost, latency."""
from __future__ import annotations

from collections import Counter

import numpy as np


def run_statistics(records: list[dict]) -> dict:
    agents = [a for r in records for a in r["agents"]]
    if not agents:
        return {}
    calls = Counter()
    for a in agents:
        calls.update(a["tool_calls"])
    n_calls = sum(calls.values())
    no_call = sum(a["replies_without_call"] for a in agents)
    invalid = sum(a["invalid_calls"] for a in agents)
    slowest = [max(a["latency"] for a in r["agents"]) for r in records]
    n_q = len(records)
    return {
        "tool_call_share": {t: round(c / n_calls, 4) for t, c in sorted(calls.items())} if n_calls else {},
        "tool_calls_per_agent": round(n_calls / len(agents), 3),
        "steps_mean": round(float(np.mean([a["steps"] for a in agents])), 3),
        "finished_share": round(float(np.mean([a["finished"] for a in agents])), 4),
        "invalid_call_rate": round((invalid + no_call) / max(1, n_calls + no_call), 4),
        "prompt_tokens": int(sum(a["prompt_tokens"] for a in agents)),
        "completion_tokens": int(sum(a["completion_tokens"] for a in agents)),
        "tokens_per_query": round(sum(a["prompt_tokens"] + a["completion_tokens"] for a in agents) / n_q, 1),
        "cost_usd": round(sum(a["cost"] for a in agents), 6),
        "cost_per_query_usd": round(sum(a["cost"] for a in agents) / n_q, 6),
        "agent_latency_p50_s": round(float(np.median([a["latency"] for a in agents])), 3),
        "query_latency_p50_s": round(float(np.median(slowest)), 3),  # a query waits for its slowest agent
        "query_latency_mean_s": round(float(np.mean(slowest)), 3),
        "failed_llm_calls": int(sum(len(a["errors"]) for a in agents)),
        "incomplete_queries": int(sum(not r["complete"] for r in records)),
    }
