"""The paper's figures from runs, as PNG (matplotlib, headless): Figure 2 budget heatmaps, Figure 3 neighborhood use
per query type, Figure 4 distillation budget, Figure 5 neighborhood calls per trajectory by success."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ark.report.runs import RunData, experiment_runs  # noqa: E402
from ark.report.tables import (ark_runs, ark_setting, distillation_rows, train_samples,  # noqa: E402
                               trajectory_rows)

HEATMAPS = {"hit1": ("hit@1", "Hit@1 (x100)"), "recall20": ("recall@20", "Recall@20 (x100)"),
            "latency": ("latency", "latency per query (ms)")}


def budget_grid(runs: list[RunData]) -> tuple[list[int], list[int], dict]:
    """(T_max values, agent counts, {(T, n): run}) of a sweep, keeping the T_max rows that have every agent count of
    the fullest row (other runs of the same setting, e.g. Table 8's, are not part of the sweep)."""
    cells = {(r.get("agent.T_max"), r.get("agent.n_agents")): r for r in runs}
    rows: dict[int, set] = {}
    for T, n in cells:
        rows.setdefault(T, set()).add(n)
    if not rows:
        return [], [], {}
    agents = max(rows.values(), key=len)
    Ts = sorted(T for T, ns in rows.items() if agents <= ns)
    return Ts, sorted(agents), cells


def cell_value(run: RunData, metric: str) -> float:
    if metric == "latency":  # each query's wall-clock time: its slowest agent, tools included
        return 1000 * float(np.mean([r.wall_time for r in run.records]))
    return 100 * run.metrics[metric]


def figure2(runs, query_sets, ark, out: Path) -> list[Path]:
    """Three heatmaps (Hit@1, Recall@20, latency) over T_max x agents, one panel per swept query set."""
    sweeps = {}
    for q in query_sets:
        found = [r for r in ark_runs(runs, {**ark, "T_max": None, "n_agents": None}, ablation__name="none",
                                     retriever__name="bm25", dataset__name="biokg", queries__name=q)]
        Ts, agents, cells = budget_grid(found)
        if len(Ts) > 1 and len(agents) > 1:
            sweeps[q] = (Ts, agents, cells)
    paths = []
    for name, (metric, label) in HEATMAPS.items():
        if not sweeps:
            break
        fig, axes = plt.subplots(1, len(sweeps), figsize=(4.2 * len(sweeps), 3.6), squeeze=False)
        for ax, (q, (Ts, agents, cells)) in zip(axes[0], sweeps.items()):
            grid = np.array([[cell_value(cells[(T, n)], metric) for n in agents] for T in Ts])
            im = ax.imshow(grid, cmap="viridis", origin="lower", aspect="auto")
            ax.set_xticks(range(len(agents)), agents)
            ax.set_yticks(range(len(Ts)), Ts)
            ax.set_xlabel("agents")
            ax.set_ylabel("T_max")
            ax.set_title(q)
            for i in range(len(Ts)):
                for j in range(len(agents)):
                    ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=8,
                            color="white" if grid[i, j] < grid.mean() else "black")
            fig.colorbar(im, ax=ax, shrink=0.8)
        fig.suptitle(f"Figure 2: {label} over the budget, {ark['backbone']} on BioKG")
        paths.append(_save(fig, out / f"figure2_{name}.png"))
    return paths


def figure3(runs, query_sets, ark_experiment: str, out: Path) -> list[Path]:
    """Share of neighborhood calls per query type against the type's share of the queries (synthetic templates)."""
    per_set = experiment_runs(runs, ark_experiment, query_sets)
    typed = {q: trajectory_rows(r) for q, r in per_set.items()}
    typed = {q: rows for q, rows in typed.items() if len({x["template"] for x in rows}) > 1}
    if not typed:
        return []
    fig, axes = plt.subplots(1, len(typed), figsize=(6 * len(typed), 3.8), squeeze=False)
    for ax, (q, rows) in zip(axes[0], typed.items()):
        types = sorted({x["template"] for x in rows})
        calls = sum(x["neighborhood_calls"] for x in rows) or 1
        queries = {x["query"]: x["template"] for x in rows}
        call_share = [100 * sum(x["neighborhood_calls"] for x in rows if x["template"] == t) / calls for t in types]
        query_share = [100 * sum(1 for v in queries.values() if v == t) / len(queries) for t in types]
        x = np.arange(len(types))
        ax.bar(x - 0.2, call_share, 0.4, label="share of neighborhood calls")
        ax.bar(x + 0.2, query_share, 0.4, label="share of queries")
        ax.set_xticks(x, types, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("%")
        ax.set_title(q)
        ax.legend(fontsize=8)
    fig.suptitle(f"Figure 3: neighborhood calls per query type, {ark_setting(ark_experiment)['backbone']} on BioKG")
    return [_save(fig, out / "figure3_neighborhood_by_query_type.png")]


def figure4(runs, distill_dir: Path, t_max: int, baseline_limit: int, out: Path) -> list[Path]:
    """Hit@1 against the number of teacher trajectories the student was trained on, on the first n queries that every
    student run of the query set covers, with the teacher and the base model on the same queries."""
    rows = distillation_rows(runs, distill_dir, t_max, baseline_limit)
    panels = {}
    for q in sorted({r["queries"] for r in rows}):
        students = [r for r in rows if r["queries"] == q and r["order"] == 4
                    and train_samples(r["run_data"].config, distill_dir) is not None]
        if not students:
            continue
        n = min(r["n_queries"] for r in students)
        points = sorted((train_samples(r["run_data"].config, distill_dir), _first_n_hit1(r["run_data"], n))
                        for r in students)
        teacher = [_first_n_hit1(r["run_data"], n) for r in rows if r["queries"] == q and r["order"] == 1
                   and r["n_queries"] >= n]
        base = [_first_n_hit1(r["run_data"], n) for r in rows if r["queries"] == q and r["order"] in (2, 3)
                and r["n_queries"] >= n]
        panels[q] = (n, points, teacher[:1], max(base) if base else None)
    if not panels:
        return []
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (q, (n, points, teacher, base)) in zip(axes[0], panels.items()):
        xs, ys = zip(*points)
        ax.plot(xs, ys, "o-", label="student (LoRA on SmolLM2)")
        for value in teacher:
            ax.axhline(value, color="tab:green", ls="--", label="teacher (rules)")
        if base is not None:
            ax.axhline(base, color="tab:red", ls=":", label="base SmolLM2")
        ax.set_xlabel("teacher trajectories")
        ax.set_ylabel(f"Hit@1 (x100), first {n} test queries")
        ax.set_title(q)
        ax.set_ylim(0, 100)
        ax.set_xlim(0, 1.2 * max(xs))
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("Figure 4: distillation budget on BioKG")
    return [_save(fig, out / "figure4_distillation_budget.png")]


def _first_n_hit1(run: RunData, n: int) -> float:
    return 100 * float(np.mean([s["hit@1"] for s in list(run.scores.values())[:n]]))


def figure5(runs, query_sets, ark_experiment: str, out: Path) -> list[Path]:
    """Histogram of neighborhood calls per trajectory, successful (own Hit@5) vs failed."""
    per_set = experiment_runs(runs, ark_experiment, query_sets)
    if not per_set:
        return []
    fig, axes = plt.subplots(1, len(per_set), figsize=(4.2 * len(per_set), 3.4), squeeze=False)
    for ax, (q, run) in zip(axes[0], per_set.items()):
        rows = trajectory_rows(run)
        top = max(x["neighborhood_calls"] for x in rows)
        bins = np.arange(-0.5, top + 1.5)
        good = [x["neighborhood_calls"] for x in rows if x["hit@5"] == 1.0]
        bad = [x["neighborhood_calls"] for x in rows if x["hit@5"] != 1.0]
        ax.hist([good, bad], bins=bins, color=["tab:green", "tab:red"],
                label=[f"successful (Hit@5): {len(good)}", f"failed: {len(bad)}"])
        ax.set_xticks(range(top + 1))
        ax.set_xlabel("neighborhood calls per trajectory")
        ax.set_ylabel("trajectories")
        ax.set_title(q)
        ax.legend(fontsize=8)
    fig.suptitle(f"Figure 5: neighborhood calls per trajectory, {ark_setting(ark_experiment)['backbone']} on BioKG")
    return [_save(fig, out / "figure5_neighborhood_calls.png")]


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})  # no version stamp: the same figure, the same bytes
    plt.close(fig)
    return path


def biokg_figures(runs, cfg_report, distill_dir: Path, out: Path) -> list[Path]:
    qs, ark = list(cfg_report["query_sets"]), cfg_report["ark"]
    d = cfg_report["distillation"]
    return (figure2(runs, qs, ark_setting(ark), out) + figure3(runs, qs, ark, out)
            + figure4(runs, distill_dir, d["t_max"], d["baseline_limit"], out) + figure5(runs, qs, ark, out))

