"""W&B logging for every stage through one place: offline by default, disabled in tests.

``logger.name=none`` turns it off; ``WANDB_MODE`` (offline | online | disabled) picks the mode.
Only the resolved config (no secrets: keys come from the environment and are never in the config)
and the metrics a stage returns are logged.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

from omegaconf import OmegaConf


class _NoRun:
    def log(self, *_args, **_kwargs):
        pass


@contextmanager
def stage_run(cfg, stage: str):
    """Context manager yielding an object with ``.log(dict)``; finishes the run on exit."""
    logger = cfg.get("logger") or {}
    if logger.get("name", "none") == "none":
        yield _NoRun()
        return
    import wandb

    config = OmegaConf.to_container(cfg, resolve=True)
    config.pop("hydra", None)
    run = wandb.init(
        project=logger.get("project", "ark"),
        dir=logger.get("dir") or os.environ.get("WANDB_DIR"),
        mode=os.environ.get("WANDB_MODE", logger.get("mode", "offline")),
        job_type=stage,
        group=logger.get("group"),
        config=config,
        reinit="finish_previous",
    )
    try:
        yield run
    finally:
        run.finish()
