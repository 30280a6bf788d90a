"""The README's quick start and Python example, run in a fresh copy of the tree (benchmarks/quickstart.py): every
step exits 0 and prints what the README shows. It downloads BioKG's pinned sources from PyPI and the Debian archive,
as a new user's first `dvc repro` does."""
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
def test_the_readme_quick_start_runs_and_prints_what_the_readme_shows(tmp_path):
    quickstart = load_benchmark("quickstart")
    steps = quickstart.steps(ROOT / "README.md")
    assert sum(s.expected is not None for s in steps) >= 5  # dvc repro, ask, show (2), the Python example
    quickstart.fresh_copy(tmp_path)
    assert not (tmp_path / "data" / "graph" / "biokg").exists()
    for step in steps:
        result = quickstart.run_step(step, tmp_path, ROOT / ".venv", timeout=600)
        assert result.returncode == 0 and not result.missing, (step.code, result.missing, result.output[-3000:])
    # a reproduction that changed no result changes no tracked file: dvc.lock and the published results as committed
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert status.stdout == "", status.stdout[-3000:]
    # after the quick start alone, `make check` checks nothing and says so (its command, as the Makefile runs it)
    check = quickstart.run_step(quickstart.Step("bash", "python -m ark.report.check", None), tmp_path, ROOT / ".venv",
                                timeout=600)
    assert check.returncode == 1 and "NOT CHECKED: 0 of " in check.output and "\nOK" not in check.output, \
        check.output[-3000:]


def test_expected_output_lines_are_matched_in_order_with_ellipses():
    missing = load_benchmark("quickstart").missing_lines
    output = "a line\nRunning stage 'x':\nhit@1=0.29 hit@5=0.5\nend"
    assert missing(["Running stage 'x':", "…", "hit@1=0.29 …"], output) == []
    assert missing(["hit@1=0.29 …", "Running stage 'x':"], output) == ["Running stage 'x':"]  # out of order
    assert missing(["hit@1=0.30 …"], output) == ["hit@1=0.30 …"]
    assert missing(["Running stage"], output) == ["Running stage"]  # a whole line, not a part of one
