"""The Python API from any directory: the project's config with its root found, so relative paths never depend on
where Python was started.

    from ark.api import compose
    spec = build.spec(compose(["dataset=biokg", "backbone=rules"]))

The root (``paths.root``, under which ``data/``, ``results/`` and the model cache lie) is, in this order: the
``root`` argument, the ``ARK_ROOT`` environment variable, the nearest directory upwards from the working directory
that holds ``dvc.yaml`` and ``conf/config.yaml`` (a clone of this project), and the clone this package is installed
from (an editable install).
"""
from __future__ import annotations

import os
from pathlib import Path

from ark.config import CONF
from ark.config import compose as compose_here
from ark.errors import UserError


def is_project(path: Path) -> bool:
    return (path / "dvc.yaml").is_file() and (path / "conf" / "config.yaml").is_file()


def find_root(root: str | os.PathLike | None = None, start: str | os.PathLike | None = None) -> Path:
    """The project root (see the module docstring), absolute."""
    if root is not None or os.environ.get("ARK_ROOT"):
        found = Path(root if root is not None else os.environ["ARK_ROOT"]).expanduser().resolve()
        if not found.is_dir():
            raise UserError(f"project root {found} ({'root=' if root is not None else 'ARK_ROOT'}) is not a directory")
        return found
    here = Path(start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if is_project(candidate):
            return candidate
    if is_project(CONF.parent):
        return CONF.parent
    raise UserError(f"no project root: neither {here} nor a directory above it holds dvc.yaml and conf/config.yaml; "
                    f"pass root= or set ARK_ROOT")


def compose(overrides=(), root: str | os.PathLike | None = None):
    """``conf/config.yaml`` with ``overrides``, its ``paths.root`` the project root (an override wins)."""
    overrides = list(overrides)
    if any(o.split("=", 1)[0].lstrip("+~") == "paths.root" for o in overrides):
        return compose_here(overrides)
    return compose_here([f"paths.root={find_root(root)}", *overrides])
