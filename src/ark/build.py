"""Config -> the run spec -> the objects a run uses, in one place. ``spec(cfg)`` is the one reader of the composed
config below the stage entry points and the CLI: it checks every value (one ``UserError`` line, before any work)
and returns a ``RunSpec`` of plain data and typed settings; everything below takes the spec. A kind of thing is a
class named by its config's ``_target_`` (``ark.config.make``), never a chain of ifs.

Adding a graph: a ``conf/dataset/<name>.yaml`` whose ``_target_`` is its source class (``ark.data``; the data
stages build it with ``ark.config.make``).
Adding a backbone: a ``conf/backbone/<name>.yaml`` whose ``_target_`` is one of ``ark.agent.backbones``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from ark.config import make, resolved
from ark.errors import UserError
from ark.io import blocking_file
from ark.llm.settings import RetryPolicy
from ark.settings import (
    PROMPTS,
    AgentSettings,
    EvalSettings,
    Limits,
    check_bool,
    check_int,
    check_number,
    from_mapping,
    is_int,
)

if TYPE_CHECKING:
    from ark.data import Dataset, QuerySet
    from ark.index import Retriever

RUN_STAGES = ("baseline", "hpo_baseline", "evaluate", "collect")  # the stages whose runs have an identity
AGENT_RUNS = ("evaluate", "collect")


def identity_of(stages: tuple[str, ...], key: str | None = None, keep_none: bool = False, group: bool = True):
    """A ``RunSpec`` field that is part of the run identity of ``stages`` (``ark.runs.identity``): its value, a typed
    settings object as plain data (``ark.runs.identity.plain``: its fields, less those its class marks
    ``{"identity": False}``), stored under ``key`` (default: the field's name); left out when null unless
    ``keep_none``. ``group``: a config group (a params file in dvc.yaml), not a single value."""
    return field(metadata={"identity": stages, "key": key, "keep_none": keep_none, "group": group})


@dataclass(frozen=True)
class CollectSettings:
    """Teacher trajectories (``collect``): which split, its first ``budget`` queries, ``trajectories`` agents per
    query, the teacher's sampling temperature (null: the backbone's own)."""

    split: str
    budget: int | None
    trajectories: int
    temperature: float | None = None

    def __post_init__(self):
        check_int("collect.trajectories", self.trajectories)
        check_int("collect.budget", self.budget, least=0, none=True)
        check_number("collect.temperature", self.temperature, none=True)


@dataclass(frozen=True)
class AblationSettings:
    """Which parts of ARK's tools a run keeps (``ablation``; Table 2)."""

    name: str
    neighbors: bool
    query_param: bool
    type_filters: bool

    def __post_init__(self):
        for name in ("neighbors", "query_param", "type_filters"):
            check_bool(f"ablation.{name}", getattr(self, name))


@dataclass(frozen=True)
class PromptSettings:
    """The agents' system prompt (``prompt``: its name in ``ark.agent.prompt``)."""

    name: str

    def __post_init__(self):
        if self.name not in PROMPTS:
            raise UserError(f"prompt must be one of {', '.join(PROMPTS)}, got {self.name!r}")


@dataclass(frozen=True)
class ServerLimits:
    """The embedded model's loopback server against a misbehaving client (``llm.server``, ``ark.llm.server``)."""

    max_body_bytes: int = 8 * 2**20
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 512
    max_pending_bytes: int = 64 * 2**20


@dataclass(frozen=True)
class LlmSettings:
    """How model calls are made on this machine (``llm``): the response cache, retries, the embedded server's
    limits. None of it is part of a run's identity."""

    cache: str | None = None
    cache_base: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    server: ServerLimits = field(default_factory=ServerLimits)


@dataclass(frozen=True)
class PathSettings:
    """Where this checkout keeps things (``paths``)."""

    root: str = "."
    data: str = "data"
    results: str = "results"
    logs: str = "logs"
    models: str | None = None


@dataclass(frozen=True)
class RunDirs:
    """Where run directories go (``run.root``) and where a run's summary files are published (``run.publish``)."""

    root: str
    publish: str | None = None


@dataclass(frozen=True)
class RunSpec:
    """Everything a run reads from the config, checked (``spec(cfg)``). The fields made with ``identity_of`` are
    its identity; the rest say how this machine carries it out and cannot change a result."""

    dataset: Dataset = identity_of(RUN_STAGES)  # an ark.data.Dataset: where its files are is not identity
    queries: QuerySet = identity_of(RUN_STAGES)
    retriever: Retriever = identity_of(("baseline", "evaluate", "collect"))
    split: str = identity_of(RUN_STAGES, group=False)
    subset_seed: int = identity_of(RUN_STAGES, group=False)  # only where the split is seeded (a fraction, spread)
    # collect's query limit is its budget (collect.budget, ark.stages.collect)
    eval: EvalSettings = identity_of(("baseline", "hpo_baseline", "evaluate"), key="eval.limit", keep_none=True,
                                     group=False)
    baseline_depth: int = identity_of(("baseline", "hpo_baseline"), key="baseline.depth", group=False)
    collect: CollectSettings = identity_of(("collect",))
    # a class of ark.agent.backbones; None in the spec of a stage that runs no agent
    backbone: object = identity_of(AGENT_RUNS)
    prompt: PromptSettings = identity_of(AGENT_RUNS)
    agent: AgentSettings = identity_of(AGENT_RUNS)
    ablation: AblationSettings = identity_of(AGENT_RUNS)
    seed: int = identity_of(AGENT_RUNS, keep_none=True, group=False)
    limits: Limits = None
    metrics: tuple = ()
    llm: LlmSettings = field(default_factory=LlmSettings)
    paths: PathSettings = field(default_factory=PathSettings)
    run: RunDirs = None
    cpu_threads: int | None = None

    @property
    def index_dir(self) -> str:
        return self.dataset.index_dir


_ABSENT = object()
REQUIRED = ("collect.trajectories", "collect.budget", "baseline.depth", "seed", "subset_seed", "split", "metrics")


def spec(cfg: DictConfig, stage: str = "evaluate") -> RunSpec:
    """The run spec of the composed config ``cfg`` for a ``stage`` run, every value checked before any work (one clear
    error, nothing written): each group's typed settings (its class checks its own fields), the backbone where the
    stage runs agents (a baseline's spec has none) and the keys below."""
    from ark.data.queries import parse_split
    from ark.eval.metrics import parse_metric

    missing = [k for k in REQUIRED if OmegaConf.select(cfg, k, default=_ABSENT) is _ABSENT]
    if missing:
        raise UserError(f"{', '.join(missing)}: missing from the config (removed by an override?); every run needs "
                        "a value")
    config = resolved(cfg)
    collect = from_mapping(CollectSettings, "collect", config["collect"])  # first: collect sets agent and eval
    check_int("baseline.depth", config["baseline"]["depth"])
    group = {g: config.get(g) or {} for g in ("agent", "eval", "limits", "llm")}
    agent = from_mapping(AgentSettings, "agent", group["agent"])
    limits = from_mapping(Limits, "limits", group["limits"])
    agent.check_limits(limits)
    evaluation = from_mapping(EvalSettings, "eval", group["eval"])
    llm = group["llm"]
    llm = from_mapping(LlmSettings, "llm", {**llm, "retry": from_mapping(RetryPolicy, "llm.retry", llm.get("retry") or {}),
                                            "server": from_mapping(ServerLimits, "llm.server", llm.get("server") or {})})
    backbone = make(cfg.backbone, "backbone") if stage in AGENT_RUNS else None
    for name in ("seed", "subset_seed"):
        check_int(name, config[name], least=0)
    capped = evaluation.max_cost_usd is not None or evaluation.max_total_cost_usd is not None
    if capped and backbone is not None and backbone.priced:  # a model billed by its calls: its price must be known
        from ark.llm.spending import token_prices, unpriced

        if token_prices(backbone.model, backbone.extra) is None:
            raise UserError(unpriced(backbone.model))
    ledger = evaluation.spend_ledger
    if ledger and (blocked := blocking_file(Path(ledger).parent)) is not None:
        raise UserError(f"eval.spend_ledger {ledger}: cannot be made there ({blocked} is a file, not a directory)")
    prompt = from_mapping(PromptSettings, "prompt", config["prompt"])
    parse_split(config["split"])
    metrics = config["metrics"]
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
        raise UserError(f"metrics must be a non-empty list such as [hit@1, mrr], got {metrics!r}")
    for metric in metrics:
        parse_metric(metric)
    check_int("cpu_threads", config.get("cpu_threads"), none=True)
    return RunSpec(dataset=make(cfg.dataset, "dataset"), queries=make(cfg.queries, "queries"),
                   retriever=make(cfg.retriever, "retriever"), split=config["split"],
                   subset_seed=config["subset_seed"], eval=evaluation, baseline_depth=config["baseline"]["depth"],
                   collect=collect, backbone=backbone, prompt=prompt, agent=agent,
                   ablation=from_mapping(AblationSettings, "ablation", config["ablation"]), seed=config["seed"],
                   limits=limits, metrics=tuple(metrics), llm=llm,
                   paths=from_mapping(PathSettings, "paths", config.get("paths") or {}),
                   run=from_mapping(RunDirs, "run", config.get("run") or {}), cpu_threads=config.get("cpu_threads"))


def spec_of(overrides, stage: str = "evaluate") -> RunSpec:
    """The run spec of ``conf/config.yaml`` with ``overrides`` (the report's and the CLI's way to a spec)."""
    from ark.config import compose

    return spec(compose(list(overrides)), stage)


def experiment_row(experiment: str) -> dict:
    """What a row file (``conf/experiment/<table>/<row>.yaml``) says about its table row (``row``; not settings)."""
    from ark.config import compose

    row = compose([f"+experiment={experiment}", "logger=none"]).get("row")
    return resolved(row) if row is not None else {}


def results_dir(overrides=()) -> Path:
    """Where runs and tables are kept (``paths.results``) under ``overrides``."""
    from ark.config import compose

    return Path(compose(list(overrides)).paths.results)




def check_files(spec: RunSpec) -> None:
    """The files an agent run of ``spec`` reads or writes besides its data, checked before any work: the student's
    adapter, the LLM response cache."""
    spec.backbone.check_files()
    if spec.backbone.uses_cache and spec.llm.cache:
        from ark.llm.cache import check_cache_file

        check_cache_file(spec.llm.cache)


def graph(spec: RunSpec):
    from ark.graph import Graph

    return Graph.load(spec.dataset.graph_dir)


def relevance(spec: RunSpec):
    """The index in ``dataset.index_dir``, which must have been built with the spec's retriever settings; its files
    are checked against the checksums its build recorded in info.json."""
    import json

    from ark.index import built_settings
    from ark.io import verify_checksums

    wanted = retriever_settings(spec)
    built = built_settings(spec.index_dir) or wanted
    if built != wanted:
        raise UserError(f"the index at {spec.index_dir} was built with other retriever settings than "
                        f"{wanted}; rebuild it (build_index) with these settings")
    info = Path(spec.index_dir) / "info.json"
    if not info.is_file():
        raise UserError(f"no index at {spec.index_dir} (no info.json): build it (build_index)")
    verify_checksums(Path(spec.index_dir), json.loads(info.read_text()).get("files"), "index", "info.json",
                     "build_index")
    return spec.retriever.load(spec.index_dir)


def retriever_settings(spec: RunSpec) -> dict:
    """The spec's retriever as its index records it (``ark.index.index_settings``: "auto" values resolved as the
    index at ``dataset.index_dir`` was built, runtime-only parameters left out)."""
    from ark.index import index_settings

    return index_settings({"name": spec.retriever.name, "params": dict(spec.retriever.params)}, spec.index_dir)


def toolbox(spec: RunSpec):
    """The agent's tools: ARK's (``agent.toolset: ark``, the default) or ARK-V1's (``ark_v1``)."""
    from ark.tools.ark_v1 import ArkV1Toolbox
    from ark.tools.toolbox import ToolConfig, Toolbox

    toolsets = {cls.toolset: cls for cls in (Toolbox, ArkV1Toolbox)}  # agent.toolset -> the class
    name = spec.agent.toolset
    if name not in toolsets:
        raise UserError(f"agent.toolset must be one of {', '.join(toolsets)}, got {name!r}")
    if name != "ark" and spec.ablation.name != "none":
        raise UserError(f"ablation={spec.ablation.name} removes parts of ARK's tools; agent.toolset={name} has "
                        "its own: use ablation=none")
    return toolsets[name](graph(spec), relevance(spec), ToolConfig.from_cfg(spec.ablation, spec.agent))


def queries(spec: RunSpec, graph, labels: bool = True) -> list[dict]:
    """The configured split, its first ``eval.limit`` rows, each checked: id, text, gold ids in the graph.
    ``labels=False`` (label-free collection): only id and text are kept as the rows are read; gold ids and the
    generator's metadata are never looked at.

    On a leave-publication-out graph, the queries must come from the phenopacket file whose publications the
    graph left out, split as it was cut, and be scored on a split it was cut for. Label-free collection may read
    another split (the teacher's training queries on the graph cut for the test cases: what the student is
    evaluated on then never reaches its training data)."""
    from ark.data.queries import brief, load_queries

    left_out = (graph.meta.get("excluded") or {}).get("source")
    source = getattr(spec.queries, "source", None)
    fractions_wanted = getattr(spec.queries, "split_fractions", None)
    if left_out and source:
        from ark.data.phenopackets import source_identity
        from ark.data.queries import parse_split

        if source_identity(source) != {k: left_out[k] for k in ("file", "sha256")}:
            raise UserError(f"{spec.dataset.name} leaves out the publications of {left_out['file']} "
                            f"(sha256 {str(left_out['sha256'])[:12]}…), but queries.source is {source}: rebuild "
                            "the graph with dataset.exclude_publications_of set to it")
        splits, fractions = left_out.get("splits"), left_out.get("split_fractions")
        if splits is not None and ((labels and parse_split(spec.split)[0] not in splits)
                                   or [float(f) for f in fractions_wanted or ()] != fractions):
            raise UserError(f"{spec.dataset.name} leaves out the publications of the {'/'.join(splits)} cases "
                            f"(split_fractions {fractions}), not those of split={spec.split} with "
                            f"queries.split_fractions {list(fractions_wanted or ())}: use a "
                            "graph cut for this split (dataset.exclude_splits)")
    num_nodes = graph.num_nodes
    queries_dir = spec.dataset.queries_dir
    rows = load_queries(queries_dir, spec.split, spec.subset_seed)
    if not labels:
        rows = [{k: q[k] for k in ("id", "query") if k in q} for q in rows]
    if spec.eval.limit is not None:
        rows = rows[: spec.eval.limit]
    if not rows:
        why = (": the split is empty (queries.split_fractions decide where each query falls); remake the query set "
               "(make_queries) with a share for it, e.g. queries.split_fractions=[0,0,1] for test (docs/data.md)"
               if fractions_wanted and spec.eval.limit != 0 else "")
        raise UserError(f"no queries in {queries_dir}/{spec.split}.jsonl{why}")
    seen, path, query_chars = set(), f"{queries_dir}/{spec.split}.jsonl", spec.limits.query_chars
    for i, q in enumerate(rows, 1):
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


def serving(spec: RunSpec, run_name: str = "", run_ledger: str | None = None):
    """How this machine reaches models; ``run_name`` and ``run_ledger``: the run the calls are for and its own spend
    ledger (the run engine's, ``eval.max_cost_usd``)."""
    from ark.agent.backbones import Serving

    return Serving(cache=spec.llm.cache or None, cache_base=spec.llm.cache_base, retry=spec.llm.retry,
                   models_dir=spec.paths.models, threads=spec.cpu_threads,
                   server=dataclasses.asdict(spec.llm.server), caps=spending_caps(spec, run_ledger), run=run_name,
                   agents_in_flight=spec.eval.concurrency * spec.agent.n_agents)


def spending_caps(spec: RunSpec, run_ledger: str | None = None) -> tuple:
    """(ledger file, cap in USD, its name) of each spending cap on a run's model calls (``ark.llm.spending``):
    ``eval.max_cost_usd`` on the run's own ledger (``run_ledger``, given by the run engine), and the shared
    ``eval.spend_ledger`` (capped by ``eval.max_total_cost_usd``, else only summed)."""
    e = spec.eval
    caps = []
    if e.max_cost_usd is not None and run_ledger:
        caps.append((str(run_ledger), float(e.max_cost_usd), "eval.max_cost_usd"))
    if e.spend_ledger:
        total = e.max_total_cost_usd
        caps.append((str(e.spend_ledger), float("inf") if total is None else float(total), "eval.max_total_cost_usd"))
    return tuple(caps)


def agent_run(spec: RunSpec) -> dict:
    """How the spec's agents run a query beyond their settings (``spec.agent``): ``ark.agent.runner.run_query``'s
    seed, system prompt and tool protocol (the backbone's)."""
    return {"seed": spec.seed, "prompt": spec.prompt.name, "text_protocol": spec.backbone.text_protocol}


def policy(spec: RunSpec, tools, run_name: str = "", run_ledger: str | None = None):
    """The policy of the spec's backbone for the duration of a block (``policy.client``: its LLM client or None);
    ``run_name``, ``run_ledger``: as ``serving``."""
    return spec.backbone.policy(tools, spec.seed, serving(spec, run_name, run_ledger))
