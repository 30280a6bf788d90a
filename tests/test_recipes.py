"""The docs' recipes followed as written, in a fresh copy of the tree: adding a table row (docs/agent.md) ends with the
new entry in ``dvc stage list`` and a pipeline ``dvc status`` parses."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)


def row_recipe() -> tuple[Path, str, str]:
    """(the row file's path, its text, the params.yaml line) as docs/agent.md gives them."""
    text = (ROOT / "docs" / "agent.md").read_text(encoding="utf-8")
    recipe = text[text.index("**A table row**"):]
    path = re.search(r"\(`(conf/experiment/[\w/]+\.yaml)`\)", recipe).group(1)
    block = re.search(r"```yaml\n(.*?)```", recipe, re.S).group(1)
    line = re.search(r"\(`(\S+: \{experiment: [^`]+\})`\)", recipe).group(1)
    return Path(path), "\n".join(row.strip() if i == 0 else row[2:] for i, row in enumerate(block.splitlines())) + "\n", line


@pytest.mark.e2e
def test_the_add_a_row_recipe_ends_with_the_entry_in_the_pipeline(tmp_path):
    path, row, line = row_recipe()
    tree = load_benchmark("quickstart").fresh_copy(tmp_path)
    (tree / path).write_text(row)
    params = (tree / "params.yaml").read_text()
    assert "\nevaluate:\n" in params
    (tree / "params.yaml").write_text(params.replace("\nevaluate:\n", f"\nevaluate:\n  {line}\n", 1))
    env = {**os.environ, "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(tree / "src")}
    stage = f"evaluate@{line.split(':')[0]}"
    listed = subprocess.run(["dvc", "stage", "list"], cwd=tree, env=env, capture_output=True, text=True)
    assert listed.returncode != 0 and "Could not find 'item." in listed.stderr  # before make deps, as the docs say
    # the real venv is not rebuilt from the copy's requirements: its install stamp is taken as it is
    deps = subprocess.run(["make", "-o", str(VENV / "bin" / ".installed"), "deps", f"VENV={VENV}"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=600)
    assert deps.returncode == 0, deps.stdout[-2000:] + deps.stderr[-2000:]
    listed = subprocess.run(["dvc", "stage", "list"], cwd=tree, env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and stage in listed.stdout, listed.stderr[-2000:]
    status = subprocess.run(["dvc", "status", stage], cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    assert status.returncode == 0, status.stderr[-2000:]
    assert (tree / "conf/experiment/table2/no_q_no_f.yaml").is_file() and "no_q_no_f" in (tree / "deps.yaml").read_text()
