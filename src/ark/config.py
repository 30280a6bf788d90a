"""The project's configuration: where ``conf/`` is, composing it (for the CLI, the report, tests and benchmarks;
each stage is a Hydra entry point over the same tree), and building the object a config node names (``make``)."""
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


def make(node, group: str):
    """The object a config node's ``_target_`` names, built from its other keys; a key the class does not take (or
    a missing one) is one clear error."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from ark.errors import UserError

    if "_target_" not in node:
        raise UserError(f"{group} {node.get('name')!r} names no class (_target_); see conf/{group}/")
    try:
        return instantiate(node, _convert_="all")
    except InstantiationException as e:
        why = " ".join(str(e.__cause__ or e).split())
        raise UserError(f"{group} {node.get('name')!r}: {why}") from None
