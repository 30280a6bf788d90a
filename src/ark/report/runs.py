"""The runs a report reads: every run directory under the given roots, known by its stored config (never its path).

A run directory holds ``config.yaml`` (its identity), ``metrics.json``, ``stats.json``, ``records.jsonl`` and
``scores.jsonl`` (``ark.runs.store``). Gold answers and candidates, which the records never hold, come from the
query files and graph that the stored config names, composed through the project's config (``ark.build``).

A run whose directory is not here can still be read from its shipped scores (``ark.report.shipped``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from ark.errors import UserError
from ark.runs.store import load_run, read_scores

if TYPE_CHECKING:
    from ark.agent.records import QueryRecord


@dataclass
class RunData:
    dir: Path
    config: dict
    metrics: dict
    stats: dict
    paths: tuple = ()  # Hydra overrides saying where this checkout keeps its data (paths.data=...)
    _records: list[QueryRecord] | None = field(default=None, repr=False)
    _scores: dict | None = field(default=None, repr=False)

    def get(self, key: str, default=None):
        """A stored setting by dotted key: ``agent.T_max``, ``backbone.name``, or a literal ``eval.limit``."""
        if key in self.config:
            return self.config[key]
        value = self.config
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                return default
            value = value[part]
        return value

    @property
    def machine(self) -> str | None:
        """The processor the run was computed on (its ``machine.json``), where it says."""
        path = self.dir / "machine.json"
        found = json.loads(path.read_text()) if path.is_file() else None
        return found.get("processor") if isinstance(found, dict) else None

    @property
    def records(self) -> list[QueryRecord]:
        if self._records is None:
            self._records = load_run(self.dir)[1]
        return self._records

    @property
    def scores(self) -> dict[str, dict]:
        if self._scores is None:
            self._scores = checked_scores(self.dir)
        return self._scores

    def units(self) -> dict[str, str]:
        """{query id: its unit, the cluster its intervals count it in} (``ark.report.intervals.units_of``)."""
        from ark.report.intervals import units_of

        return units_of(queries_of_run(self.config, self.paths, limit=False))

    def questions(self) -> dict[str, str]:
        """{query id: ``question_sha256`` of the question the run was asked}, from its records (read line by line,
        not kept: a report reads every run's)."""
        if self._records is not None:
            return {r.id: question_sha256(r.query) for r in self._records}
        path = self.dir / "records.jsonl"
        asked = {}
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        row = json.loads(line)
                        if not isinstance(row.get("query"), str):
                            raise ValueError(f"a record's query is {str(row.get('query'))[:40]!r}, not text")
                        asked[row["id"]] = question_sha256(row["query"])
        except (OSError, UnicodeDecodeError, ValueError, RecursionError, KeyError, TypeError) as e:
            raise UserError(f"{path}: not readable records ({_first_line(e)})") from None
        return asked

    def queries(self) -> list[dict]:
        return queries_of_run(self.config, self.paths)

    def candidates(self):
        return _candidates(self.config["dataset"]["name"], self.paths, self.config["dataset"].get("kind"))


def question_sha256(text: str) -> str:
    """A question's content as shipped scores and ``ark compare`` pair it: the first 16 hex digits of its sha256."""
    import hashlib  # here: a module-level import would be in the code fingerprint of every stage that reads runs

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:160]


def read_mapping(path: Path, what: str) -> dict:
    """A run's ``config.yaml``, ``metrics.json`` or ``stats.json``: the mapping it holds, or one ``UserError`` naming
    the file (cut, not JSON or YAML, nested past the reader's limit, not a mapping)."""
    try:
        text = path.read_text(encoding="utf-8")
        value = yaml.safe_load(text) if path.suffix == ".yaml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError, RecursionError) as e:
        raise UserError(f"{path}: not a readable {what} ({_first_line(e)})") from None
    if not isinstance(value, dict):
        raise UserError(f"{path}: {what} must be a mapping, got {type(value).__name__}")
    return value


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def checked_metrics(path: Path) -> dict:
    """``metrics.json``: counts (``n_*``) whole numbers >= 0, every other value a finite number in [0, 1]."""
    metrics = read_mapping(path, "metrics file")
    for key, value in metrics.items():
        ok = _finite(value) and (float(value).is_integer() and value >= 0 if str(key).startswith("n_") else 0 <= value <= 1)
        if not ok:
            raise UserError(f"{path}: {key} is {str(value)[:40]!r}, not "
                            + ("a count" if str(key).startswith("n_") else "a number in [0, 1]"))
    return metrics


def checked_scores(directory: Path, name: str = "scores.jsonl", scores: dict | None = None) -> dict[str, dict]:
    """``scores.jsonl`` as ``read_scores`` reads it (or ``scores`` already read from ``name``), or one ``UserError``
    naming the file: every row a query id, its flags (``complete``, ``answerable``) true or false and its scores
    finite numbers in [0, 1]."""
    path = directory / name
    try:
        scores = read_scores(directory) if scores is None else scores
    except (ValueError, RecursionError, UnicodeDecodeError, KeyError, AttributeError, TypeError) as e:
        raise UserError(f"{path}: not readable scores ({_first_line(e)})") from None
    for qid, row in scores.items():
        for key, value in row.items():
            if isinstance(value, bool):
                continue
            if not (_finite(value) and 0 <= value <= 1):
                raise UserError(f"{path}: query {str(qid)[:60]!r}: {key} is {str(value)[:40]!r}, not a number in "
                                f"[0, 1]")
    return scores


def load_runs(roots, paths: tuple = ()) -> list[RunData]:
    """Every finished run (``metrics.json`` and ``scores.jsonl`` beside its ``config.yaml``) under the roots, in
    path order; ``paths``: overrides such as ``("paths.data=/x/data",)`` for finding their queries and graphs."""
    runs = []
    for root in roots:
        for config_file in sorted(Path(root).glob("**/config.yaml")):
            d = config_file.parent
            if not (d / "metrics.json").exists() or not (d / "scores.jsonl").exists():
                continue  # a published copy or an unfinished run
            stats = d / "stats.json"
            runs.append(RunData(d, read_mapping(config_file, "run config"), checked_metrics(d / "metrics.json"),
                                read_mapping(stats, "stats file") if stats.exists() else {}, tuple(paths)))
    return runs


@lru_cache(maxsize=64)
def table_rows(table: str) -> tuple[str, ...]:
    """The experiment files of a table's rows, ``conf/experiment/<table>/<row>.yaml``, in their ``row.order``."""
    from ark.config import CONF

    names = [f"{table}/{p.stem}" for p in sorted((CONF / "experiment" / table).glob("*.yaml"))]
    return tuple(sorted(names, key=lambda name: row_settings(name).get("order", 0)))


@lru_cache(maxsize=256)
def row_settings(experiment: str) -> dict:
    """What a row file says about its row (``row``): its label and order in its table, the stage of its runs
    (``stage``: evaluate unless it says baseline or hpo_baseline), and the query sets it has runs on (``query_sets``:
    every one unless it names them)."""
    from ark.build import experiment_row

    return experiment_row(experiment)


@lru_cache(maxsize=256)
def experiment_spec(experiment: str, dataset: str, queries: str, paths: tuple, stage: str = "evaluate"):
    """The run spec a row file composes to on a graph and query set (``paths``: where this checkout keeps data)."""
    from ark import build

    return build.spec_of([f"dataset={dataset}", f"queries={queries}", f"+experiment={experiment}", "logger=none",
                          *paths], stage)


def experiment_runs(runs: list[RunData], experiment: str, query_sets, dataset: str | dict = "biokg"
                    ) -> dict[str, RunData]:
    """{query set: its run of ``+experiment=<experiment>``}: the run of the row's stage (``row_settings``) whose stored
    identity is what the experiment file composes to on that query set and graph (``dataset``: a graph, or {query
    set: its graph}, biokg where it names none; values each machine resolves for itself aside); query sets with no
    such run are left out."""
    row = row_settings(experiment)
    found = {}
    for q in (q for q in query_sets if q in row.get("query_sets", query_sets)):
        match = experiment_sweep(runs, experiment, q, dataset.get(q, "biokg") if isinstance(dataset, dict) else dataset)
        if match:
            found[q] = match[0]
    return found


def experiment_sweep(runs: list[RunData], experiment: str, queries: str, dataset: str = "biokg",
                     vary: tuple[str, ...] = ()) -> list[RunData]:
    """The runs of ``+experiment=<experiment>`` on one query set, as ``experiment_runs`` finds them, whatever their
    values of the settings in ``vary`` (the axes of a sweep, e.g. ``agent.T_max``), in path order."""
    from ark.runs.identity import identity, portable

    def without(ident: dict) -> dict:
        ident = portable(ident)
        for key in vary:
            group, _, name = key.partition(".")
            (ident.get(group) or {}).pop(name, None)
        return ident

    stage = row_settings(experiment).get("stage", "evaluate")
    # the identity names its stage, graph, query set and the row's own settings (its file composed once, for its
    # `row`): runs that differ in one of them are left before the file is composed on this graph
    settled = {"stage": stage, "dataset.name": dataset, "queries.name": queries,
               **{k: v for k, v in _row_values(experiment, stage).items() if k not in vary}}
    runs = [r for r in runs if all(r.get(k) == v for k, v in settled.items())]
    if not runs:
        return []
    wanted = without(identity(experiment_spec(experiment, dataset, queries, tuple(runs[0].paths), stage), stage))
    return [r for r in runs if without(r.config) == wanted]


ROW_VALUES = ("split", "eval.limit", "backbone.name", "ablation.name", "retriever.name", "agent.T_max",
              "agent.n_agents")  # settings no graph or query set changes


def _row_values(experiment: str, stage: str) -> dict:
    """The values of ``ROW_VALUES`` that a ``stage`` run's identity holds, as the row file composes them."""
    from ark.runs.identity import identity_fields

    spec = experiment_spec(experiment, "biokg", "synthetic", (), stage)
    keys = {f.metadata["key"] or f.name for f in identity_fields(stage)}
    out = {}
    for key in ROW_VALUES:
        if key in keys or key.split(".")[0] in keys:
            value = spec
            for part in key.split("."):
                value = getattr(value, part, None)
            out[key] = value
    return out


def dataset_spec(dataset: str, queries: str = "synthetic", paths: tuple = (), kind: str | None = None):
    """A spec on a stored dataset and query set name: where their files are on this machine. A query set named only
    on the command line (``queries.name=...``, no file in conf/queries/) is found by its name; so is a dataset
    without a file of its own whose ``kind`` has one (an own graph: ``dataset=tables dataset.name=<name>``)."""
    from ark import build
    from ark.config import CONF

    group = "queries" if (CONF / "queries" / f"{queries}.yaml").is_file() else "queries.name"
    chosen = [f"dataset={dataset}"]
    if not (CONF / "dataset" / f"{dataset}.yaml").is_file() and kind and (CONF / "dataset" / f"{kind}.yaml").is_file():
        chosen = [f"dataset={kind}", f"dataset.name={dataset}"]
    return build.spec_of([*chosen, f"{group}={queries}", "logger=none", *paths], "baseline")


@lru_cache(maxsize=4)
def _graph(dataset: str, paths: tuple = (), kind: str | None = None):
    from ark.graph import Graph

    return Graph.load(dataset_spec(dataset, paths=paths, kind=kind).dataset.graph_dir)


@lru_cache(maxsize=16)
def _queries(dataset: str, queries: str, split: str, subset_seed: int, limit, paths: tuple,
             kind: str | None = None) -> list[dict]:
    from ark.data.queries import load_queries

    rows = load_queries(dataset_spec(dataset, queries, paths, kind).dataset.queries_dir, split, subset_seed)
    return rows[:limit] if limit is not None else rows


@lru_cache(maxsize=4)
def _candidates(dataset: str, paths: tuple, kind: str | None = None):
    from ark.eval.metrics import as_candidates

    graph = _graph(dataset, paths, kind)
    return as_candidates(graph.candidates())


def graph(dataset: str, paths: tuple = (), kind: str | None = None):
    return _graph(dataset, tuple(paths), kind)


def run_graph(config: dict, paths: tuple = ()):
    """The graph a run's stored config names (its dataset's name, and its kind where the name has no file)."""
    return graph(config["dataset"]["name"], paths, config["dataset"].get("kind"))


def queries_of_run(config: dict, paths: tuple = (), limit: bool = True) -> list[dict]:
    """The queries with their gold answers that a run's stored config names, as it read them (split, subset and,
    with ``limit``, its ``eval.limit``); ``paths``: overrides saying where this checkout keeps its data."""
    return _queries(config["dataset"]["name"], config["queries"]["name"], config["split"],
                    config.get("subset_seed") or 0, config.get("eval.limit") if limit else None, tuple(paths),
                    config["dataset"].get("kind"))
