"""Tables from published runs (``results/<stage>/<entry>/``): each run is recognised by its stored config, never by
its directory name.

``distillation_table``: the offline distillation demonstration (README "Distillation"): on each query set, BM25, the
teacher, the base model with and without its grammar and the students, on the same test queries.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

METRICS = ("hit@1", "hit@5", "recall@20", "mrr")


def published_runs(results: Path, stage: str) -> list[dict]:
    """Every published run of a stage: ``{"config", "metrics", "stats", "entry"}``."""
    runs = []
    for config_file in sorted((results / stage).glob("*/config.yaml")):
        entry = config_file.parent
        if not (entry / "metrics.json").exists():
            continue
        stats_file = entry / "stats.json"
        runs.append({"entry": entry.name, "config": yaml.safe_load(config_file.read_text()),
                     "metrics": json.loads((entry / "metrics.json").read_text()),
                     "stats": json.loads(stats_file.read_text()) if stats_file.exists() else {}})
    return runs


def method(config: dict, results: Path) -> tuple[int, str] | None:
    """(row order, label) of an evaluation run in the distillation table."""
    b = config["backbone"]
    if b["kind"] == "rules":
        return 1, (f"teacher: rules policy, temperature {b.get('temperature', 0.0)}, "
                   f"answers of up to {b.get('max_answer', 20)} nodes")
    local = b.get("local") or {}
    if b["kind"] != "local":
        return None
    if not local.get("adapter"):
        return (2, "SmolLM2-135M base, grammar-constrained") if local.get("constrained") else \
               (3, "SmolLM2-135M base, free decoding")
    report = results / "distill" / Path(local["adapter"]).name / "report.json"
    size = ""
    if report.exists():
        r = json.loads(report.read_text())["report"]
        size = f", {r['train_samples']} trajectories"
    decoding = "grammar-constrained (a diagnostic)" if local.get("constrained") else "free decoding"
    return (5 if local.get("constrained") else 4), f"student: LoRA on SmolLM2{size}, {decoding}"


def distillation_table(results: str | Path, t_max: int = 4, baseline_limit: int = 50) -> tuple[str, list[dict]]:
    """Markdown and rows: every published evaluate run on the test split with one agent and ``t_max`` steps, and
    BM25 on the first ``baseline_limit`` test queries; per query set, each model's Hit@1 as a share of the
    teacher's where both ran on the same number of (first) queries. The runs' query counts are in the ``n`` column."""
    results = Path(results)
    rows = []
    for run in published_runs(results, "baseline"):
        c = run["config"]
        if c.get("eval.limit") == baseline_limit and c["split"] == "test":
            rows.append({"order": 0, "method": f"BM25, one global search ({c['retriever']['name']})",
                         "queries": c["queries"]["name"], "run": f"baseline@{run['entry']}", **run["metrics"],
                         "invalid_call_rate": None})
    for run in published_runs(results, "evaluate"):
        c = run["config"]
        if not (c["split"] == "test" and c["agent"]["n_agents"] == 1 and c["agent"]["T_max"] == t_max):
            continue
        labelled = method(c, results)
        if labelled:
            rows.append({"order": labelled[0], "method": labelled[1], "queries": c["queries"]["name"],
                         "run": f"evaluate@{run['entry']}", **run["metrics"],
                         "invalid_call_rate": run["stats"].get("invalid_call_rate")})
    rows.sort(key=lambda r: (r["queries"], r["order"], r["method"]))
    teacher = {(r["queries"], r["n_queries"]): r["hit@1"] for r in rows if r["order"] == 1}  # on the same queries
    lines = ["| query set | method | run | n | Hit@1 | Hit@5 | Recall@20 | MRR | invalid calls | of teacher's Hit@1 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        share = ""
        if r["order"] >= 2 and teacher.get((r["queries"], r["n_queries"])):
            r["teacher_hit1_share"] = round(r["hit@1"] / teacher[(r["queries"], r["n_queries"])], 3)
            share = f"{r['teacher_hit1_share']:.0%}"
        invalid = "" if r["invalid_call_rate"] is None else f"{100 * r['invalid_call_rate']:.1f}%"
        lines.append(f"| {r['queries']} | {r['method']} | `{r['run']}` | {r['n_queries']} | "
                     + " | ".join(f"{100 * r[m]:.2f}" for m in METRICS) + f" | {invalid} | {share} |")
    return "\n".join(lines) + "\n", rows
