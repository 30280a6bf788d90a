"""Stage report: tables from the published runs under ``results/``.

``python -m ark.stages.report`` writes ``results/tables/distillation.md`` and ``.json`` (``ark.report.tables``).
"""
from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from ark.io import write_json
from ark.report.tables import distillation_table
from ark.stages import clear_errors

GROUPS = ()  # reads published runs; no config group decides its result


def run(cfg: DictConfig) -> dict:
    results = Path(cfg.paths.results)
    markdown, rows = distillation_table(results, **cfg.report.distillation)
    out = results / "tables"
    out.mkdir(parents=True, exist_ok=True)
    (out / "distillation.md").write_text(markdown)
    write_json(out / "distillation.json", rows)
    return {"distillation": len(rows)}


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    print(run(cfg))


if __name__ == "__main__":
    main()
