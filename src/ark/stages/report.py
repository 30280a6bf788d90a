"""Stage report: every table (Markdown + CSV) and figure (PNG) of the paper from the runs under ``report.runs``.

``python -m ark.stages.report`` writes ``results/tables/`` (Tables 1-10 on BioKG, and ``stark_*``: the paper's
STaRK numbers beside ours), ``results/figures/`` (Figures 2-5), ``results/tables/numbers.json`` (every number of the
BioKG tables), ``results/metrics/<query set>.json`` (the headline numbers ``dvc metrics show`` prints) and
``results/notebooks/`` (the notebooks, executed on those files), ``results/scores/`` (every run's per-query scores,
shipped: ``ark.report.shipped.write_shipped``) and ``results/site/`` (every table and figure as a web
page, each row linking to its runs' pages: ``ark.report.site``). Runs are recognised by their stored
configs (``ark.report``).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ark.config import resolved
from ark.io import write_json
from ark.report.figures import biokg_figures
from ark.report.notebook import execute_all
from ark.report.paper import stark_tables
from ark.report.page import load_for_page
from ark.report.runs import graph, load_runs, row_settings
from ark.report.shipped import write_shipped
from ark.report.settings import report_settings
from ark.report.site import write_site
from ark.report.tables import biokg_tables
from ark.report.tables.cells import headline
from ark.stages import clear_errors, launch
from ark.tracking import log_files, log_summary, stage_run

GROUPS = ()  # reads runs; no config group decides its result
BUILDS = ("*",)  # it makes the classes any config selects (each row's run spec, to find its runs: ark.stage_deps)
NOTEBOOKS = "notebooks"  # the notebooks it executes (report.notebooks): what they import counts as its code too


def run(cfg: DictConfig) -> dict:
    r = report_settings(resolved(cfg.report))
    paths = (f"paths.root={cfg.paths.root}", f"paths.data={cfg.paths.data}")  # where the runs' queries and graphs are
    runs = load_runs(r.runs, paths)
    tables_dir, figures_dir = Path(r.tables), Path(r.figures)
    tables = []
    if r.biokg:
        graphs = {name: graph(name, paths) for name in r.graphs if (Path(cfg.paths.data) / "graph" / name).exists()}
        tables = biokg_tables(runs, r, Path(cfg.paths.data) / "queries" / "biokg", Path(r.distill), graphs)
    tables += stark_tables(runs)
    for d in (tables_dir, figures_dir) if r.biokg else (tables_dir,):  # nothing stale may linger
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    for t in tables:
        (tables_dir / f"{t.name}.md").write_text(t.markdown())
        (tables_dir / f"{t.name}.csv").write_text(t.csv())
    figures = biokg_figures(runs, r, Path(r.distill), figures_dir) if r.biokg else []
    if r.biokg:
        numbers = {t.name: t.numbers() for t in tables if not t.name.startswith("stark_")}
        write_json(tables_dir / "numbers.json", numbers)
        write_json(tables_dir / "machine_dependent.json",  # the rows `make check` compares within their interval
                   {t.name: t.machine_dependent for t in tables if t.machine_dependent and t.name in numbers})
        ark_label = row_settings(r.ark).get("label", r.ark)
        metrics_dir = Path(r.metrics)
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        for q, numbers_of_q in headline(numbers.get("table1", {}), r.query_sets, ark_label, r.graph_of).items():
            write_json(metrics_dir / f"{q}.json", numbers_of_q)
    shipped = write_shipped(runs, r.runs, Path(r.scores))
    if r.site:
        write_site(tables, figures, Path(r.site), lambda run_dir: load_for_page(run_dir, paths))
    notebooks = execute_all(Path(r.notebooks), Path(r.executed)) if r.biokg else []
    return {"runs": len(runs), "shipped": len(shipped), "notebooks": [p.name for p in notebooks], "tables": [t.name for t in tables], "figures": [p.name for p in figures],
            "tables_dir": str(tables_dir), "figures_dir": str(figures_dir)}


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "report") as log:
        result = run(cfg)
        log_summary(log, {"runs": result["runs"]})
        log_files(log, sorted(Path(result["tables_dir"]).glob("*.csv")),
                  sorted(Path(result["figures_dir"]).glob("*.png")))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    launch(main)
