"""Shipped scores: the report writes every run's per-query scores, each row with its query's unit (the cluster its
intervals resample) and its question's content hash, to ``report.scores/<stage>/<entry>/<run name>.jsonl``, committed
beside the published entries; ``shipped_run`` reads one where the run directory itself is not here (a fresh clone).
"""
from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ark.errors import UserError
from ark.report.runs import RunData, _first_line, checked_metrics, checked_scores, read_mapping


@dataclass
class ShippedRun(RunData):
    """A run known by its published entry (config, metrics, stats) and its shipped scores file: enough for
    ``ark compare``; its records, queries and graph are not here."""

    shipped: Path | None = None
    _units: dict = field(default_factory=dict, repr=False)
    _questions: dict = field(default_factory=dict, repr=False)

    def units(self) -> dict[str, str]:
        return self._units

    def questions(self) -> dict[str, str]:
        return self._questions

    @property
    def records(self):
        raise UserError(f"{self.dir}: only its per-query scores are here ({self.shipped}); `dvc repro "
                        f"{self.dir.parent.name}@{self.dir.name}` regenerates its run directory")


def write_shipped(runs: list[RunData], roots, out_dir: Path, replace: bool = True) -> list[Path]:
    """Every run's per-query scores to ``out_dir/<root's name>/<path under its root>.jsonl``, each row the query id,
    its unit (left out where it is the id) and question hash, then its scores, and a README.md saying how many and
    how large. ``replace``: what was there before is removed (the report, which reads every run); else only the
    other runs' files in the entries written (a clone holding some of the runs keeps the others' shipped scores)."""
    if replace:
        shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for run in runs:
        root = next(Path(r) for r in roots if run.dir.resolve().is_relative_to(Path(r).resolve()))
        path = out_dir / root.name / f"{run.dir.resolve().relative_to(root.resolve())}.jsonl"
        units, questions = run.units(), run.questions()
        missing = [qid for qid in run.scores if qid not in units or qid not in questions]
        if missing:
            raise UserError(f"{run.dir}: {len(missing)} scored queries are not in its query set or records (first: "
                            f"{missing[0][:60]!r})")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for qid, row in run.scores.items():
                unit = {"unit": units[qid]} if units[qid] != qid else {}
                f.write(json.dumps({"id": qid, **unit, "question": questions[qid], **row}, separators=(",", ":")) + "\n")
        written.append(path)
    for entry in {p.parent for p in written}:  # an entry's earlier runs
        for old in set(entry.glob("*.jsonl")) - set(written):
            old.unlink()
    shipped = sorted(out_dir.rglob("*.jsonl"))
    rows = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in shipped)
    mib = sum(p.stat().st_size for p in shipped) / 2 ** 20
    (out_dir / "README.md").write_text(
        f"**Shipped per-query scores**: {len(shipped)} runs, {rows:,} scored queries, {mib:.1f} MiB in "
        f"`{out_dir.parent.name}/{out_dir.name}/<stage>/<entry>/<run>.jsonl`. A row: the query id, its question's "
        "content hash (sha256, first 16 hex digits), its unit (the cluster its intervals resample, where it is not "
        "the id) and its scores. `ark compare` reads them where a run directory is not here.\n")
    return written


def shipped_dir(entry: Path) -> Path:
    """Where the shipped scores of a published entry ``<results>/<stage>/<entry>/`` are: ``<results>/scores`` (the
    report's ``report.scores``; STaRK's results/stark/scores)."""
    return entry.parent.parent / "scores"


def shipped_run(entry: Path, paths: tuple = ()) -> ShippedRun | None:
    """The run of a published entry ``results/<stage>/<entry>/`` from its shipped scores (the run its stored config
    names), or None where none were shipped."""
    from ark.runs.identity import run_name

    config = read_mapping(entry / "config.yaml", "run config")
    try:
        name = run_name(config)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise UserError(f"{entry / 'config.yaml'}: not a run's config ({_first_line(e)})") from None
    path = shipped_dir(entry) / entry.parent.name / entry.name / f"{name}.jsonl"
    if not path.is_file():
        return None
    run = ShippedRun(entry, config, checked_metrics(entry / "metrics.json"),
                     read_mapping(entry / "stats.json", "stats file") if (entry / "stats.json").exists() else {},
                     tuple(paths), shipped=path)
    scores, run._units, run._questions = {}, {}, {}
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise UserError(f"{path}: not readable shipped scores ({_first_line(e)})") from None
    for n, row in enumerate(rows, 1):
        if not (isinstance(row, dict) and isinstance(row.get("id"), str) and isinstance(row.get("question"), str)):
            raise UserError(f"{path} line {n}: a row needs a query id and a question hash")
        qid = row.pop("id")
        run._units[qid], run._questions[qid] = str(row.pop("unit", qid)), row.pop("question")
        scores[qid] = row
    run._scores = checked_scores(path.parent, path.name, scores)
    return run


def main(argv: list[str] | None = None) -> int:
    """``python -m ark.report.shipped [overrides]``: the shipped scores of the runs in this clone, written as the
    report writes them (where the report cannot run: a clone holding only some of its runs)."""
    from ark.config import compose
    from ark.report.runs import load_runs

    try:
        cfg = compose(list(sys.argv[1:] if argv is None else argv))
        roots, out = list(cfg.report.runs), Path(cfg.report.scores)
        runs = load_runs(roots, (f"paths.root={cfg.paths.root}", f"paths.data={cfg.paths.data}"))
        write_shipped(runs, roots, out, replace=False)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print((out / "README.md").read_text().strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
