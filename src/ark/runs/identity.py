"""Run identity: the resolved settings and the input contents that can change a run's result -> a directory name.

A run directory is ``<run.root>/<readable name>-<hash>``; the hash covers exactly ``identity(cfg, stage)``,
(``run_name``), so two configurations never share a directory and the same configuration resumes. Settings that cannot
change a result (paths, logger, concurrency, progress bars, cache location) are not part of it. The embedded model's
thread count is: it changes the order of its sums, and so bfloat16 replies. So are the contents of what the run reads
(``inputs``: the query file, the graph, the index, a baseline's case file; sha256, ``data_inputs``) and, for a hosted
backbone, the server its calls go to (``backbone.endpoint``: ``api_base`` or the provider's base URL from the
environment, credentials scrubbed): rewritten queries or another server are another run, never a resume.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ark.index import index_settings
from ark.io import content_sha256, sha256_tree
from ark.llm.settings import resolved_api_base
from ark.secrets import scrub_urls

# keys dropped from a group: where things are on this machine, and how fast they run
NOT_IDENTITY = {
    "dataset": {"raw_dir", "graph_dir", "index_dir", "queries_dir", "root"},
    "queries": {"qa_dir"},
    "backbone": {"api_base", "api_key_env"},
}
NOT_IDENTITY_LOCAL = {"threads", "cache_dir"}
FILE_KEYS = ("source", "exclude_publications_of")  # input files: their name counts, not where this checkout keeps them

# which groups and top-level settings decide each stage's result
STAGE_SETTINGS = {
    "baseline": ("dataset", "queries", "retriever", "split", "subset_seed", "eval.limit", "baseline.depth"),
    "hpo_baseline": ("dataset", "queries", "split", "subset_seed", "eval.limit", "baseline.depth"),
    "evaluate": ("dataset", "queries", "retriever", "split", "subset_seed", "eval.limit", "backbone", "prompt",
                 "agent", "ablation", "seed"),
    # teacher trajectories; split, agent.n_agents and backbone.temperature as set from collect (ark.stages.collect)
    "collect": ("dataset", "queries", "retriever", "split", "subset_seed", "collect", "backbone", "prompt", "agent",
                "ablation", "seed"),
}
SCALARS = ("split", "subset_seed", "seed")  # top-level settings in conf/config.yaml; dotted keys too


def config_groups(stage: str) -> tuple[str, ...]:
    """The Hydra config groups a stage's results depend on (each one a params file in dvc.yaml)."""
    return tuple(k for k in STAGE_SETTINGS[stage] if "." not in k and k not in SCALARS)


def data_inputs(cfg: DictConfig, stage: str) -> dict[str, Path]:
    """The data a ``stage`` run over ``cfg`` reads, by role: its query split's file (a subset split without a file
    of its own, ``test-0.1``, reads its base split's), the graph, and the index (the HPO baseline: the case file
    instead)."""
    from ark.data.queries import parse_split

    queries = Path(cfg.dataset.queries_dir) / f"{cfg.split}.jsonl"
    if not queries.exists():
        queries = queries.with_name(f"{parse_split(cfg.split)[0]}.jsonl")
    inputs = {"queries": queries, "graph": Path(cfg.dataset.graph_dir)}
    if stage == "hpo_baseline":
        inputs["cases"] = Path(cfg.queries.source)
    else:
        inputs["index"] = Path(cfg.dataset.index_dir)
    return inputs


def _select(cfg: DictConfig, key: str):
    value = OmegaConf.select(cfg, key, default=None)
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value


def _subset_seed(cfg: DictConfig):
    """Which queries a fractional split keeps; no setting at all for a whole split."""
    from ark.data.queries import parse_split

    return cfg.subset_seed if parse_split(cfg.split)[1] is not None else None


def identity(cfg: DictConfig, stage: str) -> dict:
    """The result-affecting settings of a ``stage`` run, as plain data (what ``config.yaml`` of the run holds)."""
    if stage not in STAGE_SETTINGS:
        raise KeyError(f"no run identity defined for stage {stage!r}")
    out: dict = {"stage": stage}
    for key in STAGE_SETTINGS[stage]:
        if key == "subset_seed":
            value = _subset_seed(cfg)
        elif key == "retriever":
            value = index_settings(_select(cfg, "retriever"), OmegaConf.select(cfg, "dataset.index_dir"))  # the index's
        else:
            value = _select(cfg, key)
        if isinstance(value, dict):  # _target_: which class reads the settings, not a setting
            value = {k: v for k, v in value.items() if k not in NOT_IDENTITY.get(key, ()) and k != "_target_"}
            for file_key in FILE_KEYS:
                if value.get(file_key):
                    value[file_key] = Path(str(value[file_key])).name
            if key == "backbone" and isinstance(value.get("local"), dict):
                local = {k: v for k, v in value["local"].items() if k not in NOT_IDENTITY_LOCAL}
                from ark.llm.weights import resolve_dtype, resolve_threads

                if local.get("dtype"):  # "auto" is bfloat16 on one machine, float32 on another
                    local["dtype"] = resolve_dtype(local["dtype"])
                local["threads"] = resolve_threads(OmegaConf.select(cfg, "cpu_threads", default=None))
                if local.get("adapter"):  # a retrained adapter at the same path is another model
                    local["adapter_sha256"] = sha256_tree(local["adapter"])
                value["local"] = local
            if key == "backbone" and value.get("kind") == "litellm":  # a hosted model: which server answers
                endpoint = resolved_api_base(value["model"], OmegaConf.select(cfg, "backbone.api_base"))
                value["endpoint"] = endpoint and scrub_urls(endpoint)
        if value is not None or key in ("seed", "eval.limit"):
            out[key] = value
    inputs = data_inputs(cfg, stage)
    out["inputs"] = {role: content_sha256(path) for role, path in inputs.items()}
    if stage == "collect":  # label-free: what it reads of the query file is each row's id and text, never its gold
        out["inputs"]["queries"] = _label_free_sha256(inputs["queries"]) or out["inputs"]["queries"]
    return out


def _label_free_sha256(path: Path) -> str | None:
    """sha256 of the (id, query) pairs of a query file, in order; None if it cannot be read as one."""
    if not path.is_file():
        return None
    h = hashlib.sha256()
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    h.update(json.dumps([row.get("id"), row.get("query")], ensure_ascii=False).encode() + b"\n")
    except (ValueError, AttributeError):  # not JSON Lines of objects: the run's own checks say what is wrong
        return None
    return h.hexdigest()


MACHINE_RESOLVED = (("backbone", "local", "threads"), ("backbone", "local", "dtype"), ("retriever", "params", "bf16"),
                    ("backbone", "endpoint"))


def portable(ident: dict) -> dict:
    """``ident`` without the values each machine resolves for itself ("auto" dtypes, thread counts, the server a
    hosted model was reached at: an api_base given on the command line or in the environment): what a run found on
    another machine is compared by (the report's lookup of a table row's runs)."""
    out = json.loads(json.dumps(ident))
    for *parents, key in MACHINE_RESOLVED:
        node = out
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(key, None)
    return out


def identity_hash(ident: dict) -> str:
    return hashlib.sha256(json.dumps(ident, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:10]


def readable_name(ident: dict) -> str:
    """``<dataset>-<queries>-<split>[-<backbone>-<ablation>-T<T>A<n>]`` or ``…-<retriever>`` for baselines."""
    parts = [ident["dataset"]["name"], ident["queries"]["name"], ident["split"]]
    if ident["stage"] == "baseline":
        parts.append(ident["retriever"]["name"])
    elif ident["stage"] == "hpo_baseline":
        parts.append("hpo")
    else:
        a = ident["agent"]
        parts += [ident["backbone"]["name"], ident["ablation"]["name"], f"T{a['T_max']}A{a['n_agents']}"]
    limit = ident.get("eval.limit") or ident.get("collect", {}).get("budget")
    if limit:
        parts.append(f"first{limit}")
    return "-".join(str(p).replace("/", "_") for p in parts)


def run_name(ident: dict) -> str:
    """The run's directory name: readable, then the hash that makes it unique."""
    return f"{readable_name(ident)}-{identity_hash(ident)}"
