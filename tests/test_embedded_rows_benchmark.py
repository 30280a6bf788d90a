"""benchmarks/embedded_rows.py on a hand-made stored run (a test double of an embedded row's records)."""
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark():
    spec = importlib.util.spec_from_file_location("embedded_rows", ROOT / "benchmarks" / "embedded_rows.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def agent(tokens, invalid=0, idle=False):
    return {"tokens": tokens, "invalid_calls": invalid, "replies_without_call": 0, "idle_stop": idle}


def test_per_query_figures_of_a_stored_row(tmp_path, capsys):
    run = tmp_path / "runs" / "evaluate" / "student-synthetic" / "biokg-synthetic-test-student-x"
    run.mkdir(parents=True)
    records = [{"agents": [agent([[1000, 50], [2000, 256]])]},               # the second reply ran to the cap
               {"agents": [agent([[900, 40], [1500, 10]], invalid=1, idle=True)]}]
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "config.yaml").write_text(yaml.safe_dump({"backbone": {"max_tokens": 256}}))
    (tmp_path / "evaluate" / "student-synthetic").mkdir(parents=True)
    (tmp_path / "evaluate" / "student-synthetic" / "timing.json").write_text(
        json.dumps({"seconds": 30.0, "processor": "test CPU"}))
    (row,) = load_benchmark().main(["--results", str(tmp_path)])
    assert row["s_per_query"] == 15.0 and row["model_calls_per_query"] == 2.0
    assert row["prompt_tokens_per_query"] == 2700 and row["completion_tokens_per_query"] == 178
    assert row["replies_at_cap"] == 0.25 and row["replies_without_valid_call"] == 0.25 and row["idle_stops"] == 1
    assert "| student-synthetic | 2 | test CPU | 15.0 |" in capsys.readouterr().out


def test_no_runs_is_one_error_line(tmp_path):
    with pytest.raises(SystemExit, match="^error: no embedded Table 5 runs"):
        load_benchmark().main(["--results", str(tmp_path)])
