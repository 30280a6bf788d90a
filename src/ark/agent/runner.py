"""n agents per query run concurrently, their answers fused; many queries run concurrently."""
from __future__ import annotations

from typing import TYPE_CHECKING

import asyncio
import time

from ark.agent.aggregate import aggregate
from ark.agent.loop import run_agent
from ark.agent.records import QueryRecord

if TYPE_CHECKING:
    from ark.settings import AgentSettings
    from ark.tools.toolbox import Toolbox


async def run_query(policy, toolbox: Toolbox, query: dict, agent: AgentSettings, *, seed: int = 0,
                    prompt: str = "ark", text_protocol: bool = False, on_event=None) -> QueryRecord:
    """The record of one query: ``agent.n_agents`` agents of ``agent.T_max`` steps (each stops after
    ``agent.idle_limit`` replies in a row without a valid tool call), their lists fused by ``agent.aggregation``
    (seeded by ``seed``); ``prompt``: the system prompt's name; ``text_protocol``: tools described in the prompt.
    No gold in it."""
    start = time.perf_counter()
    trajectories = await asyncio.gather(*(
        run_agent(policy.session(query["query"], a, agent.T_max), toolbox, query["query"], T_max=agent.T_max, agent=a,
                  text_protocol=text_protocol, on_event=on_event, prompt=prompt, idle_limit=agent.idle_limit)
        for a in range(agent.n_agents)))
    ranking = aggregate([t.answer for t in trajectories], agent.aggregation, seed=seed)
    wall = time.perf_counter() - start
    if any(t.replayed_steps for t in trajectories):
        # replayed from the cache the query took no model time now: its wall-clock time is then the slowest
        # agent's recorded model time plus its tool time, as it was when the model answered
        wall = max(sum(t.model_time) + sum(t.tool_time) for t in trajectories)
    return QueryRecord(id=query["id"], query=query["query"], ranking=ranking, agents=list(trajectories),
                       wall_time=round(wall, 4))


async def run_queries(policy, toolbox: Toolbox, queries: list[dict], agent: AgentSettings, concurrency: int,
                      on_record=None, on_event=None, **how) -> None:
    """Run the queries with at most ``concurrency`` in flight; ``on_record(query, record)`` as each finishes,
    ``on_event(kind, payload)`` as their agents step (``ark.agent.loop``); ``how``: ``run_query``'s keywords."""
    limit = asyncio.Semaphore(concurrency)

    async def one(q: dict):
        async with limit:
            record = await run_query(policy, toolbox, q, agent, on_event=on_event, **how)
        if on_record is not None:
            on_record(q, record)

    await asyncio.gather(*(one(q) for q in queries))
