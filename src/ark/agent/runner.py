"""n agents per query run concurrently, their answers fused; many queries run concurrently."""
from __future__ import annotations

import asyncio

from ark.agent.aggregate import aggregate
from ark.agent.loop import run_agent
from ark.tools.toolbox import Toolbox


async def run_query(policy, toolbox: Toolbox, query: dict, n_agents: int, T_max: int, aggregation: str,
                    seed: int = 0, on_event=None) -> dict:
    """The record of one query: every agent's trajectory and the fused ranking (no gold in it)."""
    text_protocol = getattr(policy, "text_protocol", False)
    trajectories = await asyncio.gather(*(
        run_agent(policy.session(query["query"], a), toolbox, query["query"], T_max, a, text_protocol, on_event)
        for a in range(n_agents)))
    ranking = aggregate([t.answer for t in trajectories], aggregation, seed=seed)
    return {
        "id": query["id"],
        "query": query["query"],
        "ranking": ranking,
        "complete": not any(t.errors for t in trajectories),
        "agents": [t.to_dict() for t in trajectories],
    }


async def run_queries(policy, toolbox: Toolbox, queries: list[dict], n_agents: int, T_max: int, aggregation: str,
                      concurrency: int, seed: int = 0, on_record=None) -> None:
    """Run the queries with at most ``concurrency`` in flight; ``on_record(query, record)`` as each finishes."""
    limit = asyncio.Semaphore(concurrency)

    async def one(q: dict):
        async with limit:
            record = await run_query(policy, toolbox, q, n_agents, T_max, aggregation, seed)
        if on_record is not None:
            on_record(q, record)

    await asyncio.gather(*(one(q) for q in queries))
