"""W&B logging for every stage through one place: offline by default, disabled in tests.

``logger.name=none`` turns it off; ``WANDB_MODE`` (offline | online | disabled) picks the mode.

What a stage's W&B run carries:

- name: a stage with a run identity (baseline, evaluate, collect) is named like its run directory,
  ``Run(spec, stage).name`` (readable name + hash); any other stage ``<stage>-<dataset>[-…]``
  (``NAME_PARTS``). job_type: the stage.
- tags: dataset, queries, split, retriever and, for agent runs, backbone (a hosted one: the model it called), ablation, ``T<T_max>``, ``A<n_agents>``
  (for other stages the parts of their name).
- group, first set wins: ``logger.group`` (a user's override) > ``ARK_WANDB_GROUP`` (or W&B's own
  ``WANDB_RUN_GROUP``) in the environment, which ``make repro`` sets once (``repro-<timestamp>``) so that all
  stages of one ``dvc repro`` share it > ``sweep-<job>-<sweep dir name>`` for every job of one Hydra
  ``--multirun`` (also a tag, so a sweep stays findable inside a repro's group) > none.
- config: the resolved config minus ``hydra``. Keys come from the environment only, never from the config; as a
  guard, config values under a secret-looking key (``api_key``, ``token``, ``secret``, ``password``), any
  value containing a secret-looking environment variable's value, and a URL's credentials are replaced by the marker
  of ``ark.secrets``.
- summary: the scalars a stage returns (``log_summary``); evaluate and baseline add the per-query results as a
  table (``log_queries``); the report stage logs its tables and figures with ``log_files``.
"""
from __future__ import annotations

import csv
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from ark.config import resolved, secret_name
from ark.secrets import MARKER, known_keys, scrub, scrub_urls

NAME_PARTS = {  # stages without a run identity: the config groups whose names follow the stage in its name
    "download": ("dataset",),
    "build_graph": ("dataset",),
    "build_index": ("dataset", "retriever"),
    "make_queries": ("dataset", "queries"),
    "distill": ("dataset", "distill"),
    "report": (),
}
MAX_TAG = 64  # W&B's limit


class _NoRun:
    """What ``stage_run`` yields with logging off: every call does nothing."""

    summary: dict = {}

    def log(self, *_args, **_kwargs):
        pass


def run_labels(config: dict, stage: str, run=None) -> tuple[str, list[str]]:
    """(W&B run name, tags) of ``stage``; ``config``: its resolved config; ``run``: the run directory
    (``ark.runs.store.Run``) of a stage whose runs have an identity."""
    if run is not None:
        name, tags = run.name, run.tags
    else:
        tags = [(config.get(group) or {}).get("name") for group in NAME_PARTS.get(stage, ("dataset",))]
        tags = [str(t) for t in tags if t is not None]
        name = "-".join([stage, *tags])
    return name, list(dict.fromkeys(str(t)[:MAX_TAG] for t in tags if str(t)))


def sweep_label() -> str | None:
    """``sweep-<job>-<sweep dir name>`` in a job of a Hydra ``--multirun`` (its jobs share one sweep dir), else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        if hydra_cfg.get("mode") == RunMode.MULTIRUN:
            return f"sweep-{hydra_cfg.job.name}-{Path(str(hydra_cfg.sweep.dir)).name}"
    return None


def run_group(config: dict) -> str | None:
    """The W&B group: ``logger.group`` > ``ARK_WANDB_GROUP``/``WANDB_RUN_GROUP`` > the Hydra multirun > none."""
    group = (config.get("logger") or {}).get("group") or os.environ.get("ARK_WANDB_GROUP") \
        or os.environ.get("WANDB_RUN_GROUP")
    return str(group) if group else sweep_label()


def scrub_argument(argument: str, keys: list[str] | None = None) -> str:
    """A command-line argument as W&B may record it: an override of a secret-looking key (``+backbone.api_key=…``)
    with its value replaced, a URL's credentials and every key a run knows replaced by the marker."""
    name, equals, value = argument.partition("=")
    if equals and secret_name(name.lstrip("+~")) and value:
        return f"{name}={MARKER}"
    return scrub(scrub_urls(argument), known_keys() if keys is None else keys)


def scrub_config(value, keys: list[str] | None = None):
    """A config (plain data) with every value under a secret-looking key, and every key a run knows
    (``ark.secrets``), replaced by the redaction marker."""
    keys = known_keys() if keys is None else keys
    if isinstance(value, dict):
        return {k: MARKER if secret_name(str(k)) and v is not None else scrub_config(v, keys)
                for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_config(v, keys) for v in value]
    return scrub(scrub_urls(value) if isinstance(value, str) else value, keys)


def wandb_settings(cfg, stage: str, run=None) -> dict:
    """The keyword arguments ``stage_run`` passes to ``wandb.init``."""
    config = dict(resolved(cfg))
    config.pop("hydra", None)
    logger = config.get("logger") or {}
    name, tags = run_labels(config, stage, run)
    sweep = sweep_label()  # also a tag: a sweep inside a grouped `make repro` stays findable
    return dict(
        project=logger.get("project", "ark"),
        dir=logger.get("dir") or os.environ.get("WANDB_DIR"),
        mode=os.environ.get("WANDB_MODE", logger.get("mode", "offline")),
        job_type=stage,
        name=name,
        tags=tags + ([sweep[:MAX_TAG]] if sweep else []),
        group=run_group(config),
        config=scrub_config(config),
        reinit="finish_previous",
    )


@contextmanager
def stage_run(cfg, stage: str, run=None):
    """Context manager yielding the W&B run (or a stand-in doing nothing with logging off); finishes the run on
    exit, as failed (exit code 1) when the stage raised. ``run``: see ``run_labels``."""
    logger = cfg.get("logger") or {}
    if logger.get("name", "none") == "none":
        yield _NoRun()
        return
    import wandb

    arguments = sys.argv[:]
    sys.argv[:] = [scrub_argument(a) for a in arguments]  # W&B records the command line in its run file
    try:
        logged = wandb.init(**wandb_settings(cfg, stage, run))
    finally:
        sys.argv[:] = arguments
    try:
        yield logged
    except BaseException:
        logged.finish(exit_code=1)
        raise
    logged.finish()


def log_summary(run, result: dict) -> None:
    """A stage's results as the run's summary: numbers, strings and dicts of them (as counts by type); no lists."""
    if isinstance(run, _NoRun):
        return
    run.summary.update(scrub_config({k: v for k, v in result.items() if isinstance(v, (int, float, str, dict))}))


def log_queries(run, table) -> None:
    """The per-query results of a scored run as the table ``queries``; ``table()``: its (columns, rows)
    (``ark.runs.store.query_rows``), called only with logging on."""
    if isinstance(run, _NoRun):
        return
    import wandb

    columns, rows = table()
    run.log({"queries": wandb.Table(columns=columns, data=rows)})


def _typed(rows: list[list[str]]) -> list[list]:
    """Cells of a column that are all numbers (or empty) as numbers, others as text (W&B wants one type per column)."""
    def number(cell: str):
        try:
            return int(cell)
        except ValueError:
            return float(cell)

    columns = list(zip(*rows))
    for i, col in enumerate(columns):
        try:
            columns[i] = [number(c) if c.strip() else None for c in col]
        except ValueError:
            pass
    return [list(r) for r in zip(*columns)]


def log_files(run, tables: list[Path] = (), figures: list[Path] = ()) -> None:
    """Log a report's files: each CSV table as ``tables/<stem>``, each PNG figure as the image ``figures/<stem>``.
    Does nothing with logging off."""
    if isinstance(run, _NoRun):
        return
    import wandb

    data = {}
    for path in map(Path, tables):
        with open(path, newline="", encoding="utf-8") as f:
            header, *rows = list(csv.reader(f)) or [[]]
        data[f"tables/{path.stem}"] = wandb.Table(columns=header, data=_typed(rows))
    for path in map(Path, figures):
        data[f"figures/{path.stem}"] = wandb.Image(str(path))
    if data:
        run.log(data)
