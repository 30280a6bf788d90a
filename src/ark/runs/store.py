"""A run directory and its files (DESIGN §4.4, §4.6).

``<run dir>/config.yaml``      the run's identity (its result-affecting settings), written when it starts
``<run dir>/records.jsonl``    one ``QueryRecord`` per query, appended as queries finish (no gold in it)
``<run dir>/scores.jsonl``     per-query scores against gold (not in a label-free ``collect`` run)
``<run dir>/metrics.json``     scalar metrics only (what ``dvc metrics show`` reads; not in a ``collect`` run)
``<run dir>/stats.json``       tool use, steps, invalid calls, tokens, cost (deterministic under replay)
``<run dir>/provenance.json``  package versions and sha256 of the data read
Timings and the platform go to ``<paths.logs>/runs/<run dir name>.json`` (and ``timing.json`` in the publish
dir) and W&B, outside DVC's outputs: query wall-clock p50/p95/mean, per-agent model and tool time.
With ``run.publish`` set (the DVC stages), metrics, stats, config and provenance are also copied there: a
path DVC knows in advance, committed to git.

A run that is killed leaves at most a truncated last line in ``records.jsonl``; ``RecordStore`` drops it on
open and skips the queries already complete, and ``finalize`` rewrites the file once in query order.
"""
from __future__ import annotations

import json
import platform
import shutil
from pathlib import Path

import yaml

from ark.io import hash_paths, package_versions, write_json, write_jsonl, write_text_atomic
from ark.runs.identity import identity, run_name
from ark.runs.records import QueryRecord

PUBLISHED = ("metrics.json", "stats.json", "config.yaml", "provenance.json")


class RecordStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, QueryRecord] = {}
        if self.path.exists():
            self._load()
        self._file = open(self.path, "a", encoding="utf-8")

    def _load(self) -> None:
        good = 0
        with open(self.path, "rb") as f:
            for line in f:
                try:
                    rec = QueryRecord.from_dict(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line cut by a kill: everything after it is dropped
                self.records[rec.id] = rec
                good += len(line)
        if good < self.path.stat().st_size:
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def done(self, query_id: str) -> bool:
        rec = self.records.get(query_id)
        return rec is not None and rec.complete

    def add(self, record: QueryRecord) -> None:
        self.records[record.id] = record
        self._file.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
        self._file.flush()

    def finalize(self, order: list[str]) -> list[QueryRecord]:
        """Rewrite the file atomically: one line per query, in ``order``."""
        self.close()
        rows = [self.records[i] for i in order if i in self.records]
        write_jsonl(self.path, (r.to_dict() for r in rows))
        return rows

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class Run:
    """``Run(cfg, stage)``: the directory of the run that ``cfg`` identifies, and what goes into it."""

    def __init__(self, cfg, stage: str):
        self.stage = stage
        self.identity = identity(cfg, stage)
        self.name = run_name(self.identity)
        self.dir = Path(cfg.run.root) / self.name
        self.publish_dir = Path(cfg.run.publish) if cfg.run.get("publish") else None
        self.timing_path = Path(cfg.paths.logs) / "runs" / f"{self.name}.json"

    def open(self) -> RecordStore:
        """Create or resume the run: its ``config.yaml`` must be this identity."""
        config = self.dir / "config.yaml"
        if config.exists() and yaml.safe_load(config.read_text()) != self.identity:
            raise RuntimeError(f"{config} holds another configuration than its directory name says")
        write_text_atomic(config, yaml.safe_dump(self.identity, sort_keys=True, allow_unicode=True))
        return RecordStore(self.dir / "records.jsonl")

    def finish(self, scores: list[dict] | None, metrics: dict | None, stats: dict, inputs: list) -> None:
        """``scores`` and ``metrics`` None: a label-free run (``collect``), which has neither."""
        if metrics is not None:
            write_jsonl(self.dir / "scores.jsonl", scores)
            write_json(self.dir / "metrics.json", metrics)
        write_json(self.dir / "stats.json", stats)
        write_json(self.dir / "provenance.json", {"run": self.name, "versions": package_versions(),
                                                  "data": hash_paths(inputs)})
        if self.publish_dir is not None:
            self.publish_dir.mkdir(parents=True, exist_ok=True)
            for name in PUBLISHED:
                if name != "metrics.json" or metrics is not None:
                    shutil.copyfile(self.dir / name, self.publish_dir / name)

    def write_timing(self, timing: dict) -> None:
        """Wall-clock figures and where they were measured: under ``paths.logs`` and, for a DVC stage, beside
        the published metrics (committed, but not a DVC output: a rerun's new timings change no stage)."""
        record = {"run": self.name, "platform": platform.platform(), "processor": _cpu_name(), **timing}
        write_json(self.timing_path, record)
        if self.publish_dir is not None:
            write_json(self.publish_dir / "timing.json", record)


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def data_inputs(cfg) -> list[Path]:
    """The data files a run over ``cfg``'s dataset and split reads (hashed into its provenance); a subset
    split without a file of its own (``test-0.1``) reads its base split's file."""
    from ark.data.queries import parse_split

    queries = Path(cfg.dataset.queries_dir) / f"{cfg.split}.jsonl"
    if not queries.exists():
        queries = queries.with_name(f"{parse_split(cfg.split)[0]}.jsonl")
    return [queries, Path(cfg.dataset.graph_dir), Path(cfg.dataset.index_dir)]


def load_run(directory: str | Path) -> tuple[dict, list[QueryRecord]]:
    """(identity config, records) of a finished run directory: what analyses read, never the path."""
    directory = Path(directory)
    config = yaml.safe_load((directory / "config.yaml").read_text())
    with open(directory / "records.jsonl", encoding="utf-8") as f:
        return config, [QueryRecord.from_dict(json.loads(line)) for line in f if line.strip()]


def read_scores(directory: str | Path) -> dict[str, dict]:
    """Per-query scores of a run directory, ``{query id: {metric: value, complete: bool}}`` in file order; empty for
    a run without scores (a label-free collect run)."""
    path = Path(directory) / "scores.jsonl"
    if not path.exists():
        return {}
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {r.pop("id"): r for r in rows}
