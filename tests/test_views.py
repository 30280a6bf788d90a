"""What a reader sees in a fresh clone fits a terminal."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
def test_dvc_metrics_show_fits_a_terminal_and_loads_every_metric():
    out = subprocess.run([sys.executable, "-m", "dvc", "metrics", "show"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "failed" not in (out.stdout + out.stderr).lower()
    lines = out.stdout.splitlines()
    assert sum(line.startswith("results/metrics/") for line in lines) == 3  # one row a query set
    assert max(map(len, lines)) <= 200
