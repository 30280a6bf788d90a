"""The agent's own cost per step (everything but the model call) and its throughput with many agents.

The model is a fake OpenAI-compatible endpoint on loopback that answers after a fixed latency with a
scripted 3-step trajectory (search_in_graph -> search_in_neighborhood -> add_to_answer + finish), reached
through litellm exactly as a hosted model would be. Tools run on the real BioKG graph and BM25 index.

    python benchmarks/agent_overhead.py [--latency 1.0] [--levels 1 8 32 64]

Overhead per step = (wall time of one agent - model latency x steps) / steps, at concurrency 1.
Throughput = agent steps per second with c agents in flight; ideal = c / latency.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import sys
import time
from pathlib import Path

import ark  # noqa: F401  (offline environment defaults)
from ark.agent.policies import LLMPolicy
from ark.agent.runner import run_queries
from ark.graph import Graph
from ark.index import BM25Retriever
from ark.llm.client import LLMClient
from ark.llm.settings import Backbone, RetryPolicy
from ark.llm.fake import ScriptedEndpoint, search_explore_answer
from ark.llm.server import ChatServer
from ark.settings import AgentSettings
from ark.tools.toolbox import Toolbox

ROOT = Path(__file__).resolve().parents[1]
# one agent of 10 steps, the tools' default sizes (conf/agent/default.yaml)
AGENT = AgentSettings(T_max=10, n_agents=1, aggregation="voting", global_k=5, global_k_max=30, neighbor_k=20)


def serve(latency: float, port_queue) -> None:
    """The fake model, in its own process so that its work does not count as the agent's."""

    endpoint = ScriptedEndpoint(search_explore_answer, delay=latency)
    with ChatServer(endpoint.generate, model_name="fake") as server:
        port_queue.put(server.url)
        while True:
            time.sleep(3600)


def run(policy, toolbox, queries, concurrency) -> float:
    start = time.perf_counter()
    asyncio.run(run_queries(policy, toolbox, queries, AGENT, concurrency))
    return time.perf_counter() - start


def run_workers(url: str, graph: str, index: str, queries, concurrency: int, workers: int) -> float:
    """The same agents through the evaluate stage's worker processes (``eval.workers``); seconds the workers ran
    their agents (their start-up excluded)."""
    from hydra import compose, initialize_config_dir

    from ark.runs.execute import agents
    from ark.runs.workers import run_in_workers

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[
            f"paths.root={ROOT}", f"dataset.graph_dir={graph}", f"dataset.index_dir={index}", "backbone=gpt-4.1", "backbone.model=openai/fake", f"backbone.api_base={url}",
            "backbone.api_key_env=null", "backbone.max_tokens=64", "backbone.tool_choice=auto", "llm.cache=null",
            "llm.retry.max_attempts=1", "agent.n_agents=1", "agent.T_max=10", "agent.aggregation=voting",
            f"eval.concurrency={concurrency}", f"eval.workers={workers}", "logger=none"])
    return run_in_workers(cfg, queries, workers, lambda q, r: None, agents)[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", default=str(ROOT / "data/graph/biokg"))
    p.add_argument("--index", default=str(ROOT / "data/index/biokg/bm25"))
    p.add_argument("--latency", type=float, default=1.0, help="seconds the fake model takes per call")
    p.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--serial-queries", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2, help="agents per level = rounds x agents in flight")
    p.add_argument("--workers", type=int, nargs="+", default=[1],
                   help="worker processes (eval.workers) for the throughput table; 1: the agents in this process")
    args = p.parse_args()
    if not Path(args.graph, "schema.json").exists():
        print(f"error: no graph at {args.graph}; run `dvc repro build_index@bm25` first", file=sys.stderr)
        return 1
    from common import machine  # benchmarks/ is this script's directory, first on sys.path

    print(f"machine: {machine()['cpu']} | {os.cpu_count()} CPUs | {platform.platform()} | "
          f"Python {platform.python_version()}")
    print(f"command: {' '.join(sys.argv)}")
    graph = Graph.load(args.graph)
    toolbox = Toolbox(graph, BM25Retriever(name="bm25").load(args.index))
    names = [str(n) for n in graph.name[:: max(1, graph.num_nodes // 500)]]
    queries = [{"id": str(i), "query": f"Which diseases are related to {names[i % len(names)]}?"} for i in range(max(args.levels) * args.rounds)]

    urls = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(args.latency, urls), daemon=True)
    server.start()
    url = urls.get(timeout=60)
    try:
        client = LLMClient(Backbone(name="fake", model="openai/fake", max_tokens=64), cache=None,
                           retry=RetryPolicy(max_attempts=1), api_base=url)
        policy = LLMPolicy(client, toolbox)
        run(policy, toolbox, queries[:1], 1)  # warm-up: litellm's first call imports and builds its clients
        steps_per_agent = 3
        n = args.serial_queries
        wall = run(policy, toolbox, queries[:n], 1)
        model = n * steps_per_agent * args.latency
        overhead = (wall - model) / (n * steps_per_agent)
        print(f"\nfake model latency {args.latency:.3f} s per call, {steps_per_agent} steps per agent")
        print(f"overhead per step at concurrency 1: {overhead * 1000:.1f} ms "
              f"= {100 * overhead / args.latency:.2f}% of a {args.latency:g} s step (target < 2%)")
        print(f"\n{'workers':>7} {'agents in flight':>16} {'agents':>7} {'wall s':>8} {'steps/s':>8} {'ideal':>7} "
              f"{'efficiency':>10}")
        for w in args.workers:
            for c in args.levels:
                agents = c * args.rounds
                wall = run(policy, toolbox, queries[:agents], c) if w == 1 else \
                    run_workers(url, args.graph, args.index, queries[:agents], c, w)
                rate = agents * steps_per_agent / wall
                ideal = c / args.latency
                print(f"{w:>7} {c:>16} {agents:>7} {wall:>8.2f} {rate:>8.2f} {ideal:>7.1f} {100 * rate / ideal:>9.1f}%")
    finally:
        server.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
