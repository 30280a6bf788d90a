"""``ark compare A B [C …]``: each later run against the first, on the queries both scored.

For every metric: each run's mean with its interval, the paired difference (later run minus the first) with the
interval and p the report uses for Table 1's paired table (``ark.report.intervals``: the publication is the unit
resampled for case reports, the query for synthetic queries), how many queries both scored and how many only one did.
Runs scored on different query sets, splits or graphs are refused unless ``any_queries`` (the difference would then
compare different questions, or the same questions on graphs that hold different answers), and so are queries
that share an id but not their question (with ``any_queries``: left out and counted). A run whose directory is not
here is read from its published entry and shipped scores (``ark.report.shipped.shipped_run``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

from ark.build import results_dir
from ark.errors import UserError
from ark.report.intervals import METHOD, Estimate
from ark.report.runs import load_runs
from ark.report.shipped import shipped_dir, shipped_run
from ark.report.show import STAGE_ENTRY, find_run, prose
from ark.report.tables.cells import estimate, paired_difference
from ark.report.tables.table import cell_text

if TYPE_CHECKING:
    from ark.report.runs import RunData

METRICS = ("hit@1", "hit@5", "recall@20", "mrr")


def load(spec: str, overrides: tuple) -> RunData:
    """The finished run ``spec`` names (a run directory, a published entry or ``<stage>@<entry>``), its files checked:
    readable, its scores finite, its metrics the means of its scores, every scored query in its query set."""
    results = results_dir(list(overrides))
    try:
        run_dir = find_run(spec, results)
    except UserError as missing:
        entry = published_entry(spec, results)
        run = shipped_run(entry, tuple(overrides)) if entry else None
        if run is None:
            where = f" under {shipped_dir(entry)}" if entry else ""
            raise UserError(f"{missing} (and no shipped scores of it{where})") from None
    else:
        found = [r for r in load_runs([run_dir], overrides) if r.dir.resolve() == run_dir.resolve()]
        if not found:
            raise UserError(f"{spec}: {run_dir} is not a finished run (it has no metrics.json or scores.jsonl)")
        run = found[0]
    scores = run.scores
    for m in METRICS:
        mean = sum(row.get(m, 0.0) for row in scores.values()) / len(scores) if scores else 0.0
        if m in run.metrics and abs(mean - run.metrics[m]) > 1e-6:
            raise UserError(f"{run.dir / 'metrics.json'}: {m} is {run.metrics[m]:.4f} but its scores.jsonl's mean is "
                            f"{mean:.4f}: one of the two was changed after the run")
    unknown = sorted(set(scores) - set(run.units()))
    if unknown:
        raise UserError(f"{run.dir / 'scores.jsonl'}: {len(unknown)} scored queries are not in the query set the run "
                        f"names (first: {unknown[0][:60]!r})")
    return run


def published_entry(spec: str, results: Path) -> Path | None:
    """The published entry ``results/<stage>/<entry>/`` that ``spec`` names (as itself or as ``<stage>@<entry>``)."""
    named = STAGE_ENTRY.fullmatch(spec)
    path = results / named[1] / named[2] if named and not Path(spec).exists() else Path(spec)
    return path if (path / "config.yaml").is_file() and (path / "metrics.json").is_file() else None


def scored_on(run: RunData) -> dict:
    """What a run's numbers are about: its graph (with its cut), its query set and its split."""
    return {"graph": run.config["dataset"], "queries": run.config["queries"], "split": run.config["split"]}


def described(run: RunData) -> str:
    return f"{run.config['queries']['name']} on {run.config['dataset']['name']}, {run.config['split']}"


def compare(specs: list[str], overrides: tuple = (), any_queries: bool = False) -> dict:
    """The comparison as a plain dict (``--json`` writes it; ``text`` renders it)."""
    if len(specs) < 2:
        raise UserError("ark compare needs at least two runs: the first is the one the others are compared with")
    runs = [load(s, tuple(overrides)) for s in specs]
    first = runs[0]
    for spec, run in zip(specs[1:], runs[1:]):
        if not any_queries and scored_on(run) != scored_on(first):
            raise UserError(f"{spec} was scored on {described(run)}, {specs[0]} on {described(first)} (or on another "
                            f"cut of the graph); --any-queries compares them anyway, on the query ids both scored")
    out = {"method": METHOD, "runs": [{"run": s, "dir": str(r.dir), "scored_on": described(r),
                                       "metrics": {m: _plain(estimate(r, m), 0.0) for m in METRICS}}
                                      for s, r in zip(specs, runs)], "comparisons": []}
    for spec, run in zip(specs[1:], runs[1:]):
        ids, first_ids = set(run.scores), set(first.scores)
        asked, first_asked = run.questions(), first.questions()
        other = sorted(i for i in ids & first_ids if asked.get(i) != first_asked.get(i))
        if other and not any_queries:
            raise UserError(f"{spec} and {specs[0]} asked {len(other)} of the queries they share by id another "
                            f"question (first: {other[0][:60]!r}): not the same questions; --any-queries compares "
                            f"them anyway, without those")
        same = ids & first_ids - set(other)
        diffs = {m: paired_difference(run, first, m, same) for m in METRICS}
        out["comparisons"].append({
            "run": spec, "minus": specs[0], "n": max((n for _, n in diffs.values()), default=0),
            "only_in_run": len(ids - first_ids), "only_in_first": len(first_ids - ids), "other_question": len(other),
            "difference": {m: _plain(e) for m, (e, _) in diffs.items()}})
    return out


def _plain(e, low: float = -100.0) -> dict | None:
    """An estimate as data, its interval held within what the metric can be (x100: [0, 100] for a run's mean,
    [-100, 100] for a difference; the expanded bootstrap can reach past them on few units)."""
    if e is None:
        return None
    out = {k: v for k, v in vars(e).items() if v is not None}
    out["lo"], out["hi"] = max(out["lo"], low), min(out["hi"], 100.0)
    return out


def _cell(e: dict | None) -> str:
    """An estimate as the report's tables print it (``ark.report.tables.table.cell_text``)."""
    return "-" if e is None else cell_text(Estimate(**e))


def text(result: dict) -> str:
    """The comparison as the terminal shows it (every number x100)."""
    lines = ["runs (each metric x100 with its 95 % interval):"]
    for i, r in enumerate(result["runs"]):
        lines.append(prose(f"  [{i}] {r['run']} ({r['scored_on']}): "
                           + "; ".join(f"{m} {_cell(e)}" for m, e in r["metrics"].items()), "      "))
    for c in result["comparisons"]:
        other = f", {c['other_question']} asked as other questions" if c.get("other_question") else ""
        lines.append(prose(f"{c['run']} minus {c['minus']} on the {c['n']} queries both scored ({c['only_in_run']} "
                           f"only in {c['run']}, {c['only_in_first']} only in {c['minus']}{other}):", "  "))
        for m, e in c["difference"].items():
            verdict = "" if e is None else ("  (interval covers 0: not established)" if e["lo"] <= 0 <= e["hi"]
                                            else "")
            lines.append(f"  {m:<10} {_cell(e)}{verdict}")
    lines.append(prose(f"Intervals: {result['method']}. +a/-b: the queries on which the later run scored higher / "
                       "lower."))
    return "\n".join(lines)
