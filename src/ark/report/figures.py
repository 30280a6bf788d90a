"""The paper's figures from runs, as PNG (matplotlib, headless): Figure 2 budget heatmaps, Figure 3 neighborhood use
tool use against query type, Figure 4 distillation budget, Figure 5 neighborhood calls per trajectory by success."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ark.report.runs import experiment_runs, experiment_sweep
from ark.report.tables.cells import ark_setting, estimate, scored_on  # noqa: E402
from ark.report.tables.table5 import distillation_rows, train_samples  # noqa: E402
from ark.report.tables.tool_use import trajectory_rows  # noqa: E402

if TYPE_CHECKING:
    from ark.report.settings import ReportSettings
    from ark.report.runs import RunData


BLUE, VERMILLION = "#0072B2", "#D55E00"  # Okabe and Ito's colour-blind-safe pair
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
        times = [r.wall_time for r in run.records]  # None: timings.jsonl is not in this clone (DVC leaves it out)
        return float("nan") if None in times else 1000 * float(np.mean(times))
    return 100 * run.metrics[metric]


def figure2(runs, graphs: dict[str, str], ark, out: Path) -> list[Path]:
    """Three heatmaps (Hit@1, Recall@20, latency) over T_max x agents, one panel per swept query set (each on its
    graph, ``graphs``)."""
    sweeps = {}
    for q, g in graphs.items():
        found = experiment_sweep(runs, "budget_sweep", q, g, vary=("agent.T_max", "agent.n_agents"))
        Ts, agents, cells = budget_grid(found)
        if len(Ts) > 1 and len(agents) > 1:
            sweeps[q] = (Ts, agents, cells)
    paths = []
    for name, (metric, label) in HEATMAPS.items():
        if not sweeps:
            break
        fig, axes = plt.subplots(1, len(sweeps), figsize=(5.2 * len(sweeps), 4.4), squeeze=False)
        for ax, (q, (Ts, agents, cells)) in zip(axes[0], sweeps.items()):
            grid = np.array([[cell_value(cells[(T, n)], metric) for n in agents] for T in Ts])
            im = ax.imshow(grid, cmap="viridis", origin="lower", aspect="auto")
            ax.set_xticks(range(len(agents)), agents)
            ax.set_yticks(range(len(Ts)), Ts)
            ax.set_xlabel("agents")
            ax.set_ylabel("T_max")
            ax.set_title(f"{q} on {graphs[q]}, n={cells[(Ts[0], agents[0])].metrics.get('n_queries')}", fontsize=9)
            for i, T in enumerate(Ts):
                for j, n in enumerate(agents):
                    e = estimate(cells[(T, n)], metric) if metric != "latency" else None
                    shown = f"{grid[i, j]:.1f}" + ("" if e is None else f"\n[{e.lo:.0f}, {e.hi:.0f}]")
                    ax.text(j, i, shown, ha="center", va="center", fontsize=9 if e is None else 8,
                            color="white" if grid[i, j] < grid.mean() else "black")
            fig.colorbar(im, ax=ax, shrink=0.8)
        machines = sorted({r.machine or "an unrecorded machine" for _, _, cells in sweeps.values()
                           for r in cells.values()})
        fig.suptitle(f"Figure 2: {label} over the budget, {ark['backbone']}"
                     + (f"\nmeasured on {', '.join(machines)}" if metric == "latency"
                        else "\n95 % interval below each cell"), fontsize=10)
        paths.append(_save(fig, out / f"figure2_{name}.png"))
    return paths


def figure3(runs, graphs: dict[str, str], ark_experiment: str, out: Path) -> list[Path]:
    """The paper's Figure 3 on BioKG, per query set: ARK's tool calls split into global search and neighborhood
    exploration, and below them its queries split into text-centric and relation-centric (one named bar each). STaRK's
    query types are human annotations; BioKG has none, so a query counts as text-centric when one global BM25 search
    (Table 1's BM25 run on the same graph) has a gold node in its top 20, relation-centric otherwise. The split is
    read from scores after the runs; no agent sees it."""
    per_set = experiment_runs(runs, ark_experiment, list(graphs), graphs)
    bars = {}
    for q, run in per_set.items():
        bm25 = list(experiment_runs(runs, "table1/bm25", [q], run.config["dataset"]["name"]).values())
        rows = trajectory_rows(run)
        calls = sum(x["global_calls"] + x["neighborhood_calls"] for x in rows)
        if not bm25 or not calls:
            continue
        scores = bm25[0].scores
        text = float(np.mean([scores[i]["recall@20"] > 0 for i in run.scores]))
        bars[q] = (100 * sum(x["global_calls"] for x in rows) / calls, 100 * text)
    if not bars:
        return []
    # one horizontal 100 % bar per measure and query set, each part named and numbered where it is drawn
    parts = {"ARK's tool calls": (("global search", "tab:blue"), ("neighborhood", "tab:orange")),
             "its queries": (("text-centric", "tab:green"), ("relation-centric", "tab:purple"))}
    fig, ax = plt.subplots(figsize=(9, 0.9 + 1.1 * len(bars)))
    labels, y = [], 0
    for q, (global_share, text_share) in bars.items():
        for measure, first in (("ARK's tool calls", global_share), ("its queries", text_share)):
            left = 0.0
            for (name, color), width in zip(parts[measure], (first, 100 - first)):
                ax.barh(y, width, left=left, color=color, alpha=0.8, height=0.8)
                if width >= 12:  # room for its words
                    ax.text(left + width / 2, y, f"{name} {width:.1f}%", ha="center", va="center", fontsize=8,
                            color="white")
                elif width > 0:
                    ax.text(left + width + 0.5, y, f"{width:.1f}%", ha="left", va="center", fontsize=7)
                left += width
            labels.append(f"{q} on {graphs[q]}: {measure}")
            y += 1
        y += 0.5
    ax.set_yticks([i + 0.5 * (i // 2) for i in range(len(labels))], labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("% (tool calls of all ARK trajectories; queries: text-centric when one BM25 search has a gold node "
                  "in its top 20)", fontsize=8)
    ax.set_title(f"Figure 3: tool use against query type, {ark_setting(ark_experiment)['backbone']}, test split",
                 fontsize=10)
    return [_save(fig, out / "figure3_tool_use_by_query_type.png")]


def figure4(runs, distill_dir: Path, graphs: dict[str, str], out: Path) -> list[Path]:
    """Hit@1 against the number of teacher trajectories the student was trained on; per query set (on its graph in
    ``graphs``), Table 5's comparison on the fewest first queries that every student run covers, the teacher and the
    base model drawn on the same queries."""
    rows = distillation_rows(runs, distill_dir, graphs)
    panels = {}
    for q in dict.fromkeys(r["queries"] for r in rows):  # Table 5's order
        of_set = [r for r in rows if r["queries"] == q]
        for n in sorted({r["n_queries"] for r in of_set}):  # the smallest comparison with every student in it
            block = [r for r in of_set if r["n_queries"] == n]
            students = [r for r in block if r["order"] == 4 and train_samples(r["run_data"].config, distill_dir)]
            if students and len(students) == len({r["method"] for r in of_set if r["order"] == 4}):
                points = sorted((train_samples(r["run_data"].config, distill_dir),
                                 estimate(r["run_data"], "hit@1", set(r["ids"]))) for r in students)
                teacher = [estimate(r["run_data"], "hit@1", set(r["ids"])) for r in block if r["teacher"]]
                base = [estimate(r["run_data"], "hit@1", set(r["ids"])) for r in block if r["order"] in (2, 3)]
                graph = block[0]["run_data"].config["dataset"]["name"]
                panels[q] = (n, graph, points, teacher[:1], max(base, key=lambda e: e.value) if base else None)
                break
    if not panels:
        return []
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (q, (n, graph, points, teacher, base)) in zip(axes[0], panels.items()):
        xs, es = zip(*points)
        ys = [e.value for e in es]
        ax.errorbar(xs, ys, yerr=[[e.value - e.lo for e in es], [e.hi - e.value for e in es]], fmt="o-", capsize=3,
                    label="student (LoRA on SmolLM2), 95 % interval")
        for e in teacher:
            ax.axhline(e.value, color=BLUE, ls="--", label="teacher (rules), its interval shaded")
            ax.axhspan(e.lo, e.hi, color=BLUE, alpha=0.12)
        if base is not None:  # the base model: the student of 0 trajectories
            ax.axhline(base.value, color=VERMILLION, ls=":")
            ax.errorbar([0], [base.value], yerr=[[base.value - base.lo], [base.hi - base.value]], fmt="X",
                        color=VERMILLION, ms=9, capsize=3, clip_on=False, label="base SmolLM2")
        ax.set_xlabel("teacher trajectories")
        ax.set_ylabel("Hit@1 (x100)")
        ax.set_title(f"{q} on {graph}\nthe sample's first n={n}", fontsize=9)
        ax.set_ylim(-3, 103)  # lines at 0 and 100 (base model, a perfect teacher) stay inside the frame
        ax.set_xlim(-3, 1.2 * max(xs))
    legend = {}  # one legend, right of the panels, where it covers no point
    for ax in axes[0]:
        legend.update({label: handle for handle, label in zip(*ax.get_legend_handles_labels())})
    axes[0][-1].legend(legend.values(), legend.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1),
                       frameon=False)
    fig.suptitle("Figure 4: distillation budget on BioKG, 1 agent, Table 5's publication-spread sample of the test "
                 "split", fontsize=10)
    return [_save(fig, out / "figure4_distillation_budget.png")]


def figure5(runs, graphs: dict[str, str], ark_experiment: str, out: Path) -> list[Path]:
    """Histogram of neighborhood calls per trajectory, successful (own Hit@5) vs failed."""
    per_set = experiment_runs(runs, ark_experiment, list(graphs), graphs)
    if not per_set:
        return []
    fig, axes = plt.subplots(1, len(per_set), figsize=(4.2 * len(per_set), 3.4), squeeze=False)
    for ax, (q, run) in zip(axes[0], per_set.items()):
        rows = trajectory_rows(run)
        top = max(x["neighborhood_calls"] for x in rows)
        bins = np.arange(-0.5, top + 1.5)
        good = [x["neighborhood_calls"] for x in rows if x["hit@5"] == 1.0]
        bad = [x["neighborhood_calls"] for x in rows if x["hit@5"] != 1.0]
        ax.hist([good, bad], bins=bins, color=[BLUE, VERMILLION],  # told apart without red-green vision
                label=[f"successful (Hit@5): {len(good)}", f"failed: {len(bad)}"])
        ax.set_xticks(range(0, top + 1, max(1, -(-top // 12))))  # at most ~13 labels: wider counts would overlap
        ax.set_xlabel("neighborhood calls per trajectory")
        ax.set_ylabel("trajectories")
        ax.set_title(f"{q} on {graphs[q]}\n{len(rows)} trajectories of {len(run.records)} queries", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(f"Figure 5: neighborhood calls per trajectory,\n{ark_setting(ark_experiment)['backbone']} on BioKG",
                 fontsize=10)
    return [_save(fig, out / "figure5_neighborhood_calls.png")]


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})  # no version stamp: the same figure, the same bytes
    plt.close(fig)
    return path


def biokg_figures(runs, report: ReportSettings, distill_dir: Path, out: Path) -> list[Path]:
    ark, graph_of = report.ark, dict(report.graph_of)
    graphs = scored_on(graph_of, report.query_sets)
    return (figure2(runs, graphs, ark_setting(ark), out) + figure3(runs, graphs, ark, out)
            + figure4(runs, distill_dir, graphs, out) + figure5(runs, graphs, ark, out))

