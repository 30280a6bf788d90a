"""benchmarks/stage_times.py: a stage runs from its "Running stage" line to the next one, across midnight too."""
import importlib.util
from pathlib import Path

import pytest


def load():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "stage_times.py"
    spec = importlib.util.spec_from_file_location("stage_times", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_stage_lasts_until_the_next_one_starts_even_past_midnight():
    log = ["23:58:00 Stage 'download' didn't change, skipping",
           "23:58:10 Running stage 'evaluate@a':",
           "23:59:40 evaluate ... hit@1=0.1",
           "   a continuation line without a stamp",
           "23:59:50 Running stage 'distill@b':",
           "00:04:50 Updating lock file 'dvc.lock'",
           "00:05:00 Running stage 'report':",
           "00:05:30 Use `dvc push` to send your updates to remote storage."]
    times, total = load().stage_times(log)
    assert times == [("evaluate@a", 100.0), ("distill@b", 310.0), ("report", 30.0)]
    assert total == 450.0


def test_a_log_without_stamps_is_refused():
    with pytest.raises(SystemExit, match="no stamped lines"):
        load().stage_times(["Running stage 'report':"])
