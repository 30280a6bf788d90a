"""n agents per query run concurrently, their answers fused; many queries run concurrently."""
from __future__ import annotations

import asyncio
import time

from ark.agent.aggregate import aggregate
from ark.agent.loop import run_agent
from ark.runs.records import QueryRecord
from ark.tools.toolbox import Toolbox


async def run_query(policy, toolbox: Toolbox, query: dict, n_agents: int, T_max: int, aggregation: str,
                    seed: int = 0, on_event=None, prompt: str = "ark") -> QueryRecord:
    """The record of one query: every agent's trajectory and the fused ranking (no gold in it)."""
    start = time.perf_counter()
    text_protocol = getattr(policy, "text_protocol", False)
    trajectories = await asyncio.gather(*(
        run_agent(policy.session(query["query"], a), toolbox, query["query"], T_max, a, text_protocol, on_event,
                  prompt)
        for a in range(n_agents)))
    ranking = aggregate([t.answer for t in trajectories], aggregation, seed=seed)
    wall = time.perf_counter() - start
    if any(t.replayed_steps for t in trajectories):
        # replayed from the cache the query took no model time now: its wall-clock time is then the slowest
        # agent's recorded model time plus its tool time, as it was when the model answered
        wall = max(sum(t.model_time) + sum(t.tool_time) for t in trajectories)
    return QueryRecord(id=query["id"], query=query["query"], ranking=ranking, agents=list(trajectories),
                       wall_time=round(wall, 4))


async def run_queries(policy, toolbox: Toolbox, queries: list[dict], n_agents: int, T_max: int, aggregation: str,
                      concurrency: int, seed: int = 0, on_record=None, prompt: str = "ark") -> None:
    """Run the queries with at most ``concurrency`` in flight; ``on_record(query, record)`` as each finishes."""
    limit = asyncio.Semaphore(concurrency)

    async def one(q: dict):
        async with limit:
            record = await run_query(policy, toolbox, q, n_agents, T_max, aggregation, seed, prompt=prompt)
        if on_record is not None:
            on_record(q, record)

    await asyncio.gather(*(one(q) for q in queries))
