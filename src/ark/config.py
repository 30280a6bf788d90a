"""The project's configuration: where ``conf/`` is and composing it, for the CLI, the report, tests and benchmarks
(each stage is a Hydra entry point over the same tree)."""
from __future__ import annotations

from pathlib import Path

CONF = Path(__file__).resolve().parents[2] / "conf"


def compose(overrides=(), hydra_config: bool = False):
    """``conf/config.yaml`` with ``overrides``; inside a running Hydra app (a stage), through that app's config."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=hydra_config)
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides), return_hydra_config=hydra_config)
