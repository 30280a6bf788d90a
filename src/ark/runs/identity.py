"""Run identity: the resolved settings and the input contents that can change a run's result -> a directory name.

A run directory is ``<run.root>/<readable name>-<hash>``; the hash covers exactly ``identity(spec, stage)``,
(``run_name``), so two configurations never share a directory and the same configuration resumes. Settings that cannot
change a result (paths, logger, concurrency, progress bars, cache location) are not part of it. The embedded model's
thread count is: it changes the order of its sums, and so bfloat16 replies. So are the contents of what the run reads
(``inputs``: the query file, the graph, the index, a baseline's case file; sha256, ``data_inputs``) and, for a hosted
backbone, the server its calls go to (``backbone.endpoint``: ``api_base`` or the provider's base URL from the
environment, credentials scrubbed): rewritten queries or another server are another run, never a resume.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import fields
from pathlib import Path

from ark.build import RUN_STAGES, RunSpec, retriever_settings
from ark.io import content_sha256, sha256_tree


def identity_fields(stage: str) -> list:
    """The ``RunSpec`` fields in ``stage``'s run identity (``ark.build.identity_of``), in their order."""
    if stage not in RUN_STAGES:
        raise KeyError(f"no run identity defined for stage {stage!r}")
    return [f for f in fields(RunSpec) if stage in f.metadata.get("identity", ())]


def config_groups(stage: str) -> tuple[str, ...]:
    """The Hydra config groups a stage's results depend on (each one a params file in dvc.yaml)."""
    return tuple(f.metadata["key"] or f.name for f in identity_fields(stage) if f.metadata["group"])


def data_inputs(spec: RunSpec, stage: str) -> dict[str, Path]:
    """The data a ``stage`` run of ``spec`` reads, by role: its query split's file (a subset split without a file
    of its own, ``test-0.1``, reads its base split's; ``all`` the query set's directory), the graph, and the index (the HPO baseline: the case file
    instead)."""
    from ark.data.queries import ALL, parse_split

    queries = Path(spec.dataset.queries_dir) / f"{spec.split}.jsonl"
    if not queries.exists():
        queries = queries.with_name(f"{parse_split(spec.split)[0]}.jsonl")
    if not queries.exists() and spec.split == ALL:  # every split's file: the query set's directory
        queries = queries.parent
    inputs = {"queries": queries, "graph": Path(spec.dataset.graph_dir)}
    if stage == "hpo_baseline":
        inputs["cases"] = Path(spec.queries.source)
    else:
        inputs["index"] = Path(spec.index_dir)
    return inputs


def plain(value):
    """A settings value as stored plain data: a typed settings object (a dataclass) as its fields, less those its
    class marks ``metadata={"identity": False}`` (where this checkout keeps things, how a server is reached), an input
    file marked ``metadata={"file": True}`` by its name only; lists and mappings copied."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = getattr(type(value), "kind", None)  # the class's label (a dataset's, a backbone's), not a field
        out = {"kind": kind} if isinstance(kind, str) and "kind" not in {f.name for f in fields(value)} else {}
        for f in fields(value):
            if not f.metadata.get("identity", True):
                continue
            v = plain(getattr(value, f.name))
            out[f.name] = Path(str(v)).name if f.metadata.get("file") and v else v
        return out
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def identity(spec: RunSpec, stage: str) -> dict:
    """The result-affecting settings of a ``stage`` run, as plain data (what ``config.yaml`` of the run holds): the
    spec's identity fields (``plain``) and the contents of its inputs."""
    out: dict = {"stage": stage}
    for f in identity_fields(stage):
        value = setting(spec, f)
        if value is not None or f.metadata["keep_none"]:
            out[f.metadata["key"] or f.name] = value
    inputs = data_inputs(spec, stage)
    out["inputs"] = {role: content_sha256(path) for role, path in inputs.items()}
    if stage == "collect":  # label-free: what it reads of the query file is each row's id and text, never its gold
        out["inputs"]["queries"] = _label_free_sha256(inputs["queries"]) or out["inputs"]["queries"]
    return out


def setting(spec: RunSpec, f) -> object:
    """The stored value of one identity field ``f`` of ``spec``."""
    from ark.data.queries import parse_split

    if f.name == "subset_seed":  # which queries a seeded split keeps; no setting at all for a whole split
        return spec.subset_seed if parse_split(spec.split)[1] is not None else None
    if f.name == "eval":
        return spec.eval.limit
    if f.name == "retriever":
        return retriever_settings(spec)
    if f.name == "backbone":
        return _backbone_identity(plain(spec.backbone), spec)
    return plain(getattr(spec, f.name))


def graph_setting(spec: RunSpec) -> dict:
    """The stored settings of ``spec``'s graph (its ``dataset`` identity field, as a trajectory run keeps it)."""
    return setting(spec, next(f for f in identity_fields("collect") if f.name == "dataset"))


def same_graph_up_to_cut(a: dict, b: dict) -> bool:
    """Whether two stored graph settings (a run's ``dataset``) build the same graph up to a leave-publication-out cut
    (which removes annotations, never a node: node ids mean the same in both)."""
    cut = ("name", "exclude_publications_of", "exclude_split_fractions", "exclude_splits")
    return {k: v for k, v in a.items() if k not in cut} == {k: v for k, v in b.items() if k not in cut}


def _backbone_identity(value: dict, spec: RunSpec) -> dict:
    """The embedded model's settings as this machine resolves them (dtype, threads, the adapter's content); a
    hosted model's server."""
    if isinstance(value.get("local"), dict):
        local = dict(value["local"])
        from ark.llm.weights import resolve_dtype, resolve_threads

        if local.get("dtype"):  # "auto" is bfloat16 on one machine, float32 on another
            local["dtype"] = resolve_dtype(local["dtype"])
        local["threads"] = resolve_threads(spec.cpu_threads)
        if local.get("adapter"):  # a retrained adapter at the same path is another model
            local["adapter_sha256"] = sha256_tree(local["adapter"])
        value["local"] = local
    if spec.backbone.served:  # a hosted model: which server answers
        value["endpoint"] = spec.backbone.endpoint()
    return value


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
        parts += [backbone_label(ident["backbone"]), ident["ablation"]["name"], f"T{a['T_max']}A{a['n_agents']}"]
    limit = ident.get("eval.limit") or ident.get("collect", {}).get("budget")
    if limit:
        parts.append(f"first{limit}")
    return "-".join(str(p).replace("/", "_") for p in parts)


def backbone_label(backbone: dict) -> str:
    """A backbone as run names and W&B tags show it: a hosted one by the model it called (``backbone=gpt-4.1
    backbone.model=openai/fake`` is ``openai_fake``, not ``gpt-4.1``), any other by its config name."""
    if backbone.get("kind") == "litellm" and backbone.get("model"):
        return str(backbone["model"]).replace("/", "_")
    return str(backbone["name"])


def run_tags(ident: dict, stage: str) -> list[str]:
    """The W&B tags of a run: what its name says, one part each."""
    tags = [ident["dataset"]["name"], ident["queries"]["name"], ident["split"]]
    tags += [ident["retriever"]["name"]] if "retriever" in ident else [stage]
    if "agent" in ident:
        a = ident["agent"]
        tags += [backbone_label(ident["backbone"]), ident["ablation"]["name"], f"T{a['T_max']}", f"A{a['n_agents']}"]
    return [str(t) for t in tags]


def run_name(ident: dict) -> str:
    """The run's directory name: readable, then the hash that makes it unique."""
    return f"{readable_name(ident)}-{identity_hash(ident)}"
