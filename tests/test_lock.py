"""The lock (requirements/*.txt) against pyproject.toml's ranges, constraints.txt and the installed packages."""
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def pins(*names) -> dict[str, str]:
    out = {}
    for name in names:
        for line in (ROOT / "requirements" / name).read_text().splitlines():
            if m := PIN.match(line):
                out[canonicalize_name(m.group(1))] = m.group(2)
    return out


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]


@pytest.mark.parametrize("lock", ["cpu.txt", "gpu.txt"])
def test_every_declared_dependency_is_pinned_within_its_range(lock):
    locked = pins(lock)
    for req in declared():
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} (pyproject.toml) is not in requirements/{lock}: run `make lock`"
        assert req.specifier.contains(locked[name], prereleases=True), \
            f"requirements/{lock} pins {req.name}=={locked[name]}, outside pyproject.toml's {req.specifier}"


def test_constraints_hold_in_the_cpu_lock():
    locked = pins("cpu.txt")
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if m := PIN.match(line):
            assert locked.get(canonicalize_name(m.group(1))) == m.group(2), f"constraints.txt says {line}: run `make lock`"


def test_installed_packages_are_the_lock():
    """What `make install` put here is exactly the lock (run the tests from its virtualenv)."""
    locked = pins("cpu.txt", "no-deps.txt")
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    for tool in ("pip", "setuptools", "wheel", "ark"):  # the venv's own tools, unless pinned, and this project
        if tool not in locked:
            installed.pop(tool, None)
    assert {n: (v, installed.get(n)) for n, v in locked.items() if installed.get(n) != v} == {}
    assert sorted(set(installed) - set(locked)) == []
