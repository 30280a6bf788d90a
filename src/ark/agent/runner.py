"""n agents per query run concurrently, their answers fused; many queries run concurrently."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ark.agent.aggregate import aggregate
from ark.agent.loop import run_agent
from ark.agent.records import QueryRecord
from ark.tools.toolbox import Toolbox


@dataclass(frozen=True)
class AgentConfig:
    """How the agents of one query run: how many, for how many steps, how their answers are fused, the seed of
    that fusion, the system prompt, whether tools are described in the prompt (``text_protocol``), and after how
    many replies in a row without a valid tool call an agent stops (``idle_limit``; None: never)."""

    n_agents: int
    T_max: int
    aggregation: str = "voting"
    seed: int = 0
    prompt: str = "ark"
    text_protocol: bool = False
    idle_limit: int | None = None


async def run_query(policy, toolbox: Toolbox, query: dict, agent: AgentConfig, on_event=None) -> QueryRecord:
    """The record of one query: every agent's trajectory and the fused ranking (no gold in it)."""
    start = time.perf_counter()
    trajectories = await asyncio.gather(*(
        run_agent(policy.session(query["query"], a, agent.T_max), toolbox, query["query"], agent.T_max, a, agent.text_protocol,
                  on_event, agent.prompt, agent.idle_limit)
        for a in range(agent.n_agents)))
    ranking = aggregate([t.answer for t in trajectories], agent.aggregation, seed=agent.seed)
    wall = time.perf_counter() - start
    if any(t.replayed_steps for t in trajectories):
        # replayed from the cache the query took no model time now: its wall-clock time is then the slowest
        # agent's recorded model time plus its tool time, as it was when the model answered
        wall = max(sum(t.model_time) + sum(t.tool_time) for t in trajectories)
    return QueryRecord(id=query["id"], query=query["query"], ranking=ranking, agents=list(trajectories),
                       wall_time=round(wall, 4))


async def run_queries(policy, toolbox: Toolbox, queries: list[dict], agent: AgentConfig, concurrency: int,
                      on_record=None) -> None:
    """Run the queries with at most ``concurrency`` in flight; ``on_record(query, record)`` as each finishes."""
    limit = asyncio.Semaphore(concurrency)

    async def one(q: dict):
        async with limit:
            record = await run_query(policy, toolbox, q, agent)
        if on_record is not None:
            on_record(q, record)

    await asyncio.gather(*(one(q) for q in queries))
