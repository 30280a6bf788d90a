"""Config -> the objects a run uses, in one place: graph, relevance, toolbox, queries, backbone and policy. A kind
of thing is a class named by its config's ``_target_`` (``ark.config.make``), never a chain of ifs.
Used by the run engine (``ark.runs.execute``) and the stages.

Adding a graph: a ``conf/dataset/<name>.yaml`` whose ``_target_`` is its source class (``ark.data``; the data
stages build it with ``ark.config.make``).
Adding a backbone: a ``conf/backbone/<name>.yaml`` whose ``_target_`` is one of ``ark.agent.backbones``.
"""
from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from ark.config import make, resolved
from ark.errors import UserError
from ark.io import blocking_file
from ark.llm.settings import RetryPolicy
from ark.settings import AgentSettings, EvalSettings, Limits, check_int, check_number, from_mapping, is_int

if TYPE_CHECKING:
    from ark.agent.runner import AgentConfig



_ABSENT = object()
REQUIRED = ("collect.trajectories", "collect.budget", "baseline.depth", "seed", "subset_seed", "split", "metrics")


def settings(cfg: DictConfig) -> tuple[AgentSettings, EvalSettings, Limits, RetryPolicy]:
    """The typed settings (``ark.settings``) of ``cfg``'s agent, eval, limits and retry groups, each checked."""
    groups = {g: OmegaConf.to_container(OmegaConf.select(cfg, g, default={}) or {}, resolve=True)
              for g in ("agent", "eval", "limits", "llm.retry")}
    agent = from_mapping(AgentSettings, "agent", groups["agent"])
    limits = from_mapping(Limits, "limits", groups["limits"])
    agent.check_limits(limits)
    return agent, from_mapping(EvalSettings, "eval", groups["eval"]), limits, from_mapping(
        RetryPolicy, "llm.retry", groups["llm.retry"])


def validate(cfg: DictConfig) -> None:
    """Config values checked before any work (one clear error, nothing written): the typed settings, the backbone
    (its class checks its own fields), and the top-level keys below."""
    from ark.agent.prompt import check_prompt
    from ark.data.queries import parse_split
    from ark.eval.metrics import parse_metric

    missing = [k for k in REQUIRED if OmegaConf.select(cfg, k, default=_ABSENT) is _ABSENT]
    if missing:
        raise UserError(f"{', '.join(missing)}: missing from the config (removed by an override?); every run needs "
                        "a value")
    for name, value in (("collect.trajectories", cfg.collect.trajectories), ("baseline.depth", cfg.baseline.depth)):
        check_int(name, value)  # first: collect sets agent.n_agents and eval.limit from these two
    check_int("collect.budget", cfg.collect.budget, least=0, none=True)
    _, evaluation, _, _ = settings(cfg)
    backbone(cfg)
    for name in ("seed", "subset_seed"):
        check_int(name, cfg[name], least=0)
    check_number("collect.temperature", OmegaConf.select(cfg, "collect.temperature"), none=True)
    ledger = evaluation.spend_ledger
    if ledger and (blocked := blocking_file(Path(ledger).parent)) is not None:
        raise UserError(f"eval.spend_ledger {ledger}: cannot be made there ({blocked} is a file, not a directory)")
    check_prompt(cfg.prompt.name)
    parse_split(cfg.split)
    if not OmegaConf.is_list(cfg.metrics) or not cfg.metrics or not all(isinstance(m, str) for m in cfg.metrics):
        raise UserError(f"metrics must be a non-empty list such as [hit@1, mrr], got {cfg.metrics!r}")
    for metric in cfg.metrics:
        parse_metric(metric)
    adapter = OmegaConf.select(cfg, "backbone.local.adapter")
    if adapter and not Path(adapter).is_dir():
        raise UserError(f"backbone.local.adapter: no adapter directory at {adapter}")
    if cfg.backbone.get("kind") != "rules" and cfg.llm.get("cache"):
        from ark.llm.cache import check_cache_file

        check_cache_file(cfg.llm.cache)


def graph(cfg: DictConfig):
    from ark.graph import load_graph

    return load_graph(cfg.dataset)


def relevance(cfg: DictConfig):
    """The index in ``dataset.index_dir``, which must have been built with ``cfg.retriever``'s settings."""
    from ark.index import built_settings, index_settings

    wanted = index_settings(resolved(cfg.retriever), cfg.dataset.index_dir)
    built = built_settings(cfg.dataset.index_dir) or wanted
    if built != wanted:
        raise UserError(f"the index at {cfg.dataset.index_dir} was built with other retriever settings than "
                        f"{wanted}; rebuild it (build_index) with these settings")
    return make(cfg.retriever, "retriever").load(cfg.dataset.index_dir)


def toolbox(cfg: DictConfig):
    """The agent's tools: ARK's (``agent.toolset: ark``, the default) or ARK-V1's (``ark_v1``)."""
    from ark.tools.ark_v1 import ArkV1Toolbox
    from ark.tools.toolbox import ToolConfig, Toolbox

    toolsets = {cls.toolset: cls for cls in (Toolbox, ArkV1Toolbox)}  # agent.toolset -> the class
    name = cfg.agent.get("toolset", "ark")
    if name not in toolsets:
        raise UserError(f"agent.toolset must be one of {', '.join(toolsets)}, got {name!r}")
    if name != "ark" and cfg.ablation.name != "none":
        raise UserError(f"ablation={cfg.ablation.name} removes parts of ARK's tools; agent.toolset={name} has "
                        "its own: use ablation=none")
    return toolsets[name](graph(cfg), relevance(cfg), ToolConfig.from_cfg(cfg.ablation, cfg.agent))


def queries(cfg: DictConfig, graph, labels: bool = True) -> list[dict]:
    """The configured split, its first ``eval.limit`` rows, each checked: id, text, gold ids in the graph.
    ``labels=False`` (label-free collection): only id and text are kept as the rows are read; gold ids and the
    generator's metadata are never looked at.

    On a leave-publication-out graph, the queries must come from the phenopacket file whose publications the
    graph left out."""
    from ark.data.queries import brief, load_queries

    left_out = (graph.meta.get("excluded") or {}).get("source")
    source = cfg.queries.get("source")
    if left_out and source:
        from ark.data.phenopackets import source_identity
        from ark.data.queries import parse_split

        if source_identity(source) != {k: left_out[k] for k in ("file", "sha256")}:
            raise UserError(f"{cfg.dataset.name} leaves out the publications of {left_out['file']} "
                            f"(sha256 {str(left_out['sha256'])[:12]}…), but queries.source is {source}: rebuild "
                            "the graph with dataset.exclude_publications_of set to it")
        splits, fractions = left_out.get("splits"), left_out.get("split_fractions")
        if splits is not None and (parse_split(cfg.split)[0] not in splits or [
                float(f) for f in cfg.queries.get("split_fractions") or ()] != fractions):
            raise UserError(f"{cfg.dataset.name} leaves out the publications of the {'/'.join(splits)} cases "
                            f"(split_fractions {fractions}), not those of split={cfg.split} with "
                            f"queries.split_fractions {list(cfg.queries.get('split_fractions') or ())}: use a "
                            "graph cut for this split (dataset.exclude_splits)")
    num_nodes = graph.num_nodes
    rows = load_queries(cfg.dataset.queries_dir, cfg.split, cfg.subset_seed)
    if not labels:
        rows = [{k: q[k] for k in ("id", "query") if k in q} for q in rows]
    if cfg.eval.limit is not None:
        rows = rows[: cfg.eval.limit]
    if not rows:
        raise UserError(f"no queries in {cfg.dataset.queries_dir}/{cfg.split}.jsonl")
    seen, path, query_chars = set(), f"{cfg.dataset.queries_dir}/{cfg.split}.jsonl", cfg.limits.query_chars
    for i, q in enumerate(rows, 1):  # config values read once: each read of an interpolated key parses it again
        where = f"{path} row {i}"
        if not isinstance(q.get("id"), str) or not isinstance(q.get("query"), str) or not q["query"].strip():
            raise UserError(f"{where}: needs a string 'id' and a non-empty string 'query'")
        if q["id"] in seen:
            raise UserError(f"{where}: duplicate query id {q['id']!r}")
        if len(q["query"]) > query_chars:
            raise UserError(f"{where}: the question has {len(q['query']):,} characters, over limits.query_chars="
                            f"{query_chars:,}")
        seen.add(q["id"])
        if not labels:
            continue
        gold = q.get("answer_ids")
        if not isinstance(gold, list) or not gold or not all(is_int(v) and 0 <= v < num_nodes for v in gold):
            raise UserError(f"{where}: answer_ids must be a list of node ids in 0..{num_nodes - 1} (at least "
                            f"one); got {brief(gold)}")
    return rows


def backbone(cfg: DictConfig):
    """``cfg.backbone`` as its class (``ark.agent.backbones``)."""
    return make(cfg.backbone, "backbone")


def serving(cfg: DictConfig, run_name: str = "", run_ledger: str | None = None):
    """How this machine reaches models; ``run_name`` and ``run_ledger``: the run the calls are for and its own spend
    ledger (the run engine's, ``eval.max_cost_usd``)."""
    from ark.agent.backbones import Serving

    _, _, _, retry = settings(cfg)
    return Serving(cache=cfg.llm.cache or None, cache_base=cfg.llm.get("cache_base"), retry=retry,
                   models_dir=cfg.paths.models, threads=cfg.cpu_threads,
                   server=OmegaConf.to_container(cfg.llm.get("server") or {}),
                   caps=spending_caps(cfg, run_ledger), run=run_name,
                   agents_in_flight=OmegaConf.select(cfg, "eval.concurrency", default=8) * cfg.agent.n_agents)


def spending_caps(cfg: DictConfig, run_ledger: str | None = None) -> tuple:
    """(ledger file, cap in USD, its name) of each spending cap on a run's model calls (``ark.llm.spending``):
    ``eval.max_cost_usd`` on the run's own ledger (``run_ledger``, given by the run engine), and the shared
    ``eval.spend_ledger`` (capped by ``eval.max_total_cost_usd``, else only summed)."""
    e = cfg.eval
    caps = []
    if e.get("max_cost_usd") is not None and run_ledger:
        caps.append((str(run_ledger), float(e.max_cost_usd), "eval.max_cost_usd"))
    if e.get("spend_ledger"):
        total = e.get("max_total_cost_usd")
        caps.append((str(e.spend_ledger), float("inf") if total is None else float(total), "eval.max_total_cost_usd"))
    return tuple(caps)


def agent_config(cfg: DictConfig, spec) -> "AgentConfig":
    """How the agents run (``cfg.agent``, the seed, the prompt, and the tool protocol of ``spec``, the backbone)."""
    from ark.agent.runner import AgentConfig

    a = cfg.agent
    return AgentConfig(n_agents=a.n_agents, T_max=a.T_max, aggregation=a.aggregation, seed=cfg.seed,
                       prompt=cfg.prompt.name, text_protocol=spec.text_protocol, idle_limit=a.get("idle_limit"))


def policy(cfg: DictConfig, tools, spec, run_name: str = "", run_ledger: str | None = None):
    """The policy of ``spec`` (``backbone(cfg)``) for the duration of a block (``policy.client``: its LLM client or
    None); ``run_name``, ``run_ledger``: as ``serving``."""
    return spec.policy(tools, cfg.seed, serving(cfg, run_name, run_ledger))
