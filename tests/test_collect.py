"""The collect stage: label-free teacher trajectories on the train split, resumable, a valid distill teacher."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ark.io import read_jsonl, write_jsonl
from ark.build import spec
from ark.runs.store import Run, load_run
from tests.conftest import ROOT, compose_cfg

TRAIN = [{"id": "t1", "query": "Which phenotype of Marfan disease", "answer_ids": [2]},
         {"id": "t2", "query": "long fingers", "answer_ids": [3]},
         {"id": "t3", "query": "Which findings of Holt-Oram heart disease", "answer_ids": [7, 8]}]


@pytest.fixture
def tiny_train(tiny_project):
    """The tiny project with its index built and a train split of 3 queries; overrides for a rules teacher."""
    from ark.stages import build_index

    overrides = tiny_project + ["retriever.params.stemmer=null", "backbone=rules", "eval.progress=false"]
    cfg = compose_cfg(overrides)
    build_index.run(cfg)
    write_jsonl(Path(cfg.dataset.queries_dir) / "train.jsonl", TRAIN)
    return overrides


def collect(overrides, *extra):
    from ark.stages import collect as stage

    return stage.run(compose_cfg(overrides + list(extra)))


def without_timings(run_dir) -> list[dict]:
    """The records of a run (they hold no times: those are in timings.jsonl beside them)."""
    rows = read_jsonl(Path(run_dir) / "records.jsonl")
    assert not any("wall_time" in r or any("model_time" in a for a in r["agents"]) for r in rows)
    return rows


def test_collect_writes_every_trajectory_of_the_train_split_and_no_label(tiny_train, tmp_path):
    result = collect(tiny_train, "collect.trajectories=3", f"run.publish={tmp_path}/published")
    run_dir = Path(result["run_dir"])
    config, records = load_run(run_dir)
    assert [r.id for r in records] == ["t1", "t2", "t3"] and result["n_trajectories"] == 9
    assert all([a.agent for a in r.agents] == [0, 1, 2] and all(a.finished for a in r.agents) for r in records)
    assert config["stage"] == "collect" and config["split"] == "train" and config["agent"]["n_agents"] == 3
    assert config["backbone"]["temperature"] == 0.7 and config["collect"]["budget"] is None
    assert len({json.dumps(a.messages) for a in records[2].agents}) == 3  # the teacher's agents differ
    assert not (run_dir / "metrics.json").exists() and not (run_dir / "scores.jsonl").exists()
    stats = json.loads((run_dir / "stats.json").read_text())
    assert stats["invalid_call_rate"] == 0 and stats["tool_call_share"]["search_in_graph"] > 0
    assert sorted(p.name for p in (tmp_path / "published").iterdir()) == ["config.yaml", "provenance.json",
                                                                           "stats.json", "timing.json"]
    text = (run_dir / "records.jsonl").read_text()
    assert "answer_ids" not in text and "hit@1" not in text and '"meta"' not in text
    # gold is never read: other (even invalid) gold ids give the same records, in a fresh run root
    queries = Path(compose_cfg(tiny_train).dataset.queries_dir) / "train.jsonl"
    write_jsonl(queries, [{**q, "answer_ids": [999999]} for q in TRAIN])
    again = collect(tiny_train, "collect.trajectories=3", f"run.root={tmp_path}/other")
    assert Path(again["run_dir"]).name == run_dir.name and without_timings(again["run_dir"]) == without_timings(run_dir)


@pytest.mark.e2e  # a collection per setting: ~5 CPU-s
def test_collect_settings_are_its_identity(tiny_train):
    def name(*extra):
        from ark.stages.collect import collect_cfg

        return Run(spec(collect_cfg(compose_cfg(tiny_train + list(extra)))), "collect").name

    base = name()
    assert "-train-rules-none-T20A3-" in base
    assert "first2" in name("collect.budget=2")
    others = [name(o) for o in ("collect.budget=2", "collect.trajectories=2", "collect.temperature=0.3",
                                "collect.temperature=null", "collect.split=val", "seed=1")]
    assert len({base, *others}) == 7
    assert name("eval.concurrency=1", "split=test", "agent.n_agents=1", "backbone.temperature=0.1") == base
    # the rules backbone's own temperature is part of an evaluation's identity too
    evaluate = [Run(spec(compose_cfg(tiny_train + t)), "evaluate").name for t in ([], ["backbone.temperature=0.5"])]
    assert evaluate[0] != evaluate[1]


def test_a_killed_collection_resumes_without_redoing_its_queries(tiny_train, monkeypatch):
    from ark.agent.policies import RulesPolicy

    first = collect(tiny_train, "collect.budget=2")
    records = Path(first["run_dir"]) / "records.jsonl"
    lines = records.read_text().splitlines(keepends=True)
    records.write_text(lines[0] + lines[1][:40])  # killed while writing the second query
    seen = []
    session = RulesPolicy.session
    monkeypatch.setattr(RulesPolicy, "session", lambda self, q, a, T_max=None: seen.append(q) or session(self, q, a, T_max))
    again = collect(tiny_train, "collect.budget=2")
    assert again["run_dir"] == first["run_dir"] and set(seen) == {TRAIN[1]["query"]} and len(seen) == 3
    assert records.read_text().splitlines(keepends=True)[0] == lines[0]  # the done query kept as it was
    assert [r.id for r in load_run(first["run_dir"])[1]] == ["t1", "t2"]
    assert without_timings(first["run_dir"])[1]["agents"] == [
        {k: v for k, v in a.items() if k not in ("model_time", "tool_time")}
        for a in json.loads(lines[1])["agents"]]


@pytest.mark.e2e  # a Python subprocess
def test_the_collect_cli_prints_one_line(tiny_train):
    out = subprocess.run([sys.executable, "-m", "ark.stages.collect", *tiny_train, "collect.budget=1",
                          "collect.trajectories=2"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "collect biokg/synthetic/train/rules at temperature 0.7: 2 trajectories of 1 queries" in out.stdout


@pytest.mark.e2e
def test_distill_accepts_a_collect_run(tiny_train, tokenizer, tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ark.stages import distill

    run_dir = collect(tiny_train, "collect.trajectories=2")["run_dir"]
    cfg = compose_cfg(tiny_train + ["distill=smoke", f"distill.teacher={run_dir}", f"distill.out={tmp_path}/student"])
    torch.manual_seed(0)
    tiny = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
                                        max_position_embeddings=4096))
    result = distill.run(cfg, tiny, tokenizer)
    assert result["train_samples"] + result["val_samples"] == 6
    card = (tmp_path / "student" / "README.md").read_text()
    assert "Teacher: `rules`" in card and "/ train, " in card and "2 trajectories per query" in card
