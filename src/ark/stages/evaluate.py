"""Stage evaluate: run the ARK agents on a query split and score their fused rankings.

``python -m ark.stages.evaluate dataset=… queries=… backbone=… agent=… ablation=…`` writes
``records.jsonl`` (DESIGN §4.4) and ``metrics.json`` (§4.6) under
``results/runs/evaluate/<dataset>/<queries>/<backbone>/<ablation>/T<T_max>_A<n_agents>/``.
Killed and rerun, it resumes from its records; rerun with a warm LLM cache it makes no model call.
"""
from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from ark.agent.records import RecordStore
from ark.agent.runner import run_queries
from ark.data.queries import load_queries
from ark.eval.metrics import as_candidates, mean_scores, score_query
from ark.eval.trajectories import run_statistics
from ark.graph import load_graph
from ark.index import load_relevance
from ark.io import write_run_metrics
from ark.tools.toolbox import ToolConfig, Toolbox
from ark.tracking import stage_run
from ark.stages import clear_errors

GROUPS = ("paths", "dataset", "queries", "retriever", "ablation", "agent", "backbone", "logger")


def out_dir(cfg: DictConfig) -> Path:
    a = cfg.agent
    return (Path(cfg.paths.results) / "runs" / "evaluate" / cfg.dataset.name / cfg.queries.name / cfg.backbone.name
            / cfg.ablation.name / f"T{a.T_max}_A{a.n_agents}")


def make_toolbox(cfg: DictConfig) -> Toolbox:
    graph = load_graph(cfg.dataset)
    return Toolbox(graph, load_relevance(cfg.retriever.name, cfg.dataset.index_dir),
                   ToolConfig.from_cfg(cfg.ablation, cfg.agent))


@contextlib.contextmanager
def make_policy(cfg: DictConfig, toolbox: Toolbox):
    """The policy of ``cfg.backbone``; for the embedded model, also its loopback server for the duration."""
    b = cfg.backbone
    if b.kind == "rules":
        from ark.agent.policies import RulesPolicy

        yield RulesPolicy(toolbox, OmegaConf.to_container(b.type_words), b.search_size, b.expand), None
        return
    from ark.agent.policies import LLMPolicy
    from ark.llm.client import Backbone, LLMClient, ResponseCache, RetryPolicy

    cache = ResponseCache(cfg.llm.cache) if cfg.llm.cache else None
    retry = RetryPolicy(**OmegaConf.to_container(cfg.llm.retry))
    if b.kind == "local":
        from ark.llm.local import LocalChatModel
        from ark.llm.server import ChatServer

        model = LocalChatModel(**OmegaConf.to_container(b.local, resolve=True))
        with ChatServer(model.generate, model_name=b.model.split("/", 1)[-1]) as server:
            client = LLMClient(Backbone.from_cfg(b), cache, retry, api_base=server.url)
            yield LLMPolicy(client, toolbox, cfg.seed), client
        return
    client = LLMClient(Backbone.from_cfg(b), cache, retry)
    yield LLMPolicy(client, toolbox, cfg.seed), client


def run(cfg: DictConfig) -> dict:
    queries = load_queries(cfg.dataset.queries_dir, cfg.split)
    if cfg.eval.limit:
        queries = queries[: cfg.eval.limit]
    if not queries:
        raise ValueError(f"no queries in {cfg.dataset.queries_dir}/{cfg.split}.jsonl")
    gold = {q["id"]: q["answer_ids"] for q in queries}
    toolbox = make_toolbox(cfg)
    graph = toolbox.graph
    candidates = as_candidates(graph.candidate_ids()) if graph.meta.get("candidate_types") else None
    out = out_dir(cfg)
    store = RecordStore(out / "records.jsonl")
    todo = [q for q in queries if not store.done(q["id"])]
    a = cfg.agent
    progress = tqdm(total=len(queries), initial=len(queries) - len(todo), desc=f"evaluate {cfg.backbone.name}",
                    mininterval=1)
    running = {"hit@1": 0.0, "n": 0, "cost": 0.0}

    def on_record(query: dict, record: dict) -> None:
        record["metrics"] = score_query(record["ranking"], gold[query["id"]], list(cfg.metrics), candidates)
        store.add(record)
        running["n"] += 1
        running["hit@1"] += record["metrics"].get("hit@1", 0.0)
        running["cost"] += sum(ag["cost"] for ag in record["agents"])
        progress.update(1)
        progress.set_postfix(hit1=f"{running['hit@1'] / running['n']:.3f}", cost=f"${running['cost']:.4f}", refresh=False)

    model_calls = 0
    try:
        with make_policy(cfg, toolbox) as (policy, client):
            asyncio.run(run_queries(policy, toolbox, todo, a.n_agents, a.T_max, a.aggregation,
                                    cfg.eval.concurrency, cfg.seed, on_record))
            model_calls = client.calls if client is not None else 0
    finally:
        progress.close()
        records = store.finalize([q["id"] for q in queries])
    per_query = [r["metrics"] for r in records]
    metrics = {**mean_scores(per_query), **run_statistics(records), "split": cfg.split}
    write_run_metrics(out, metrics, cfg)
    return {**metrics, "model_calls_this_run": model_calls}


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "evaluate") as log:
        result = run(cfg)
        log.log({k: v for k, v in result.items() if isinstance(v, (int, float))})
    shown = " ".join(f"{k}={result[k]:.4f}" for k in ("hit@1", "hit@5", "recall@20", "mrr"))
    print(f"evaluate {cfg.dataset.name}/{cfg.queries.name}/{cfg.backbone.name}/{cfg.ablation.name} "
          f"({result['n_queries']} queries): {shown} invalid_call_rate={result.get('invalid_call_rate')} "
          f"model calls this run={result['model_calls_this_run']}")


if __name__ == "__main__":
    main()
