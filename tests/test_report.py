"""Tables from published runs: rows are recognised by their stored configs."""
import json
from pathlib import Path

import yaml

from ark.report.tables import distillation_table


def publish(results: Path, stage: str, entry: str, config: dict, hit1: float, invalid: float | None = None):
    d = results / stage / entry
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    metrics = {"hit@1": hit1, "hit@5": hit1, "recall@20": hit1, "mrr": hit1, "n_queries": 50, "n_incomplete": 0}
    (d / "metrics.json").write_text(json.dumps(metrics))
    (d / "stats.json").write_text(json.dumps({} if invalid is None else {"invalid_call_rate": invalid}))


def run_config(backbone: dict, limit=50, T_max=4, n_agents=1, queries="synthetic"):
    return {"stage": "evaluate", "split": "test", "eval.limit": limit, "queries": {"name": queries},
            "agent": {"T_max": T_max, "n_agents": n_agents}, "backbone": backbone}


def test_the_distillation_table_finds_its_runs_by_config(tmp_path):
    local = {"kind": "local", "name": "local_smollm2", "local": {"constrained": True, "adapter": None}}
    publish(tmp_path, "baseline", "a", {"split": "test", "eval.limit": 50, "queries": {"name": "synthetic"},
                                        "retriever": {"name": "bm25"}}, 0.1)
    publish(tmp_path, "evaluate", "b", run_config({"kind": "rules", "name": "rules_teacher", "temperature": 0.7,
                                                         "max_answer": 5}), 0.4, 0.0)
    publish(tmp_path, "evaluate", "c", run_config(local), 0.0, 0.9)
    publish(tmp_path, "evaluate", "d", run_config({**local, "local": {"constrained": False,
                                                                     "adapter": "data/students/s1"}}), 0.3, 0.02)
    publish(tmp_path, "evaluate", "g", run_config({**local, "local": {"constrained": True,
                                                                     "adapter": "data/students/s1"}}), 0.1, 0.0)
    publish(tmp_path, "evaluate", "e", run_config(local, T_max=20), 0.5)  # another experiment: not in the table
    publish(tmp_path, "evaluate", "f", run_config(local, n_agents=3), 0.5)  # neither
    (tmp_path / "distill" / "s1").mkdir(parents=True)
    (tmp_path / "distill" / "s1" / "report.json").write_text(json.dumps({"report": {"train_samples": 96}}))
    markdown, rows = distillation_table(tmp_path)
    assert [r["run"] for r in rows] == ["baseline@a", "evaluate@b", "evaluate@c", "evaluate@d", "evaluate@g"]
    assert rows[1]["method"] == "teacher: rules policy, temperature 0.7, answers of up to 5 nodes"
    student = rows[-2]
    assert "grammar-constrained" in rows[-1]["method"] and "free decoding" in student["method"]
    assert "96 trajectories" in student["method"] and student["teacher_hit1_share"] == 0.75
    assert "| synthetic | student: LoRA on SmolLM2, 96 trajectories, free decoding | `evaluate@d` | 50 | 30.00" \
        in markdown and "| 2.0% | 75% |" in markdown
