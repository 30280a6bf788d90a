"""W&B runs as their users expect: name, tags and group from the run identity and the sweep, no secret in anything
logged, the per-query results as a table, a report's files."""
import json
import sys
from pathlib import Path

import pytest
import yaml

from ark.runs.store import query_rows
from tests.conftest import ROOT, compose_cfg

CANARY = "sk-canary-7f3a9c2e51d04b68"


class FakeRun:
    """What ``wandb.init`` returns, recording what is logged."""

    def __init__(self, **kwargs):
        self.kwargs, self.logged, self.summary, self.saved, self.exit_code = kwargs, [], {}, [], None

    def log(self, data, **_kwargs):
        self.logged.append(data)

    def save(self, path, **_kwargs):
        self.saved.append(path)

    def finish(self, exit_code=None):
        self.exit_code = exit_code


@pytest.fixture
def runs(monkeypatch):
    """Every ``wandb.init`` call, as a ``FakeRun`` holding its arguments; no group in the environment."""
    import wandb

    made = []

    def init(**kwargs):
        made.append(FakeRun(**kwargs))
        return made[-1]

    monkeypatch.setattr(wandb, "init", init)
    for var in ("ARK_WANDB_GROUP", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(var, raising=False)
    return made


@pytest.fixture
def no_hydra_config():
    from hydra.core.hydra_config import HydraConfig

    yield
    HydraConfig.instance().cfg = None  # an in-process multirun leaves its last job's config behind


def start(cfg, stage, run=None) -> FakeRun:
    from ark.tracking import stage_run

    with stage_run(cfg, stage, run) as run:
        return run


def test_runs_with_an_identity_are_named_and_tagged_like_their_run_directory(runs):
    from ark.build import spec
    from ark.runs.store import Run
    from ark.stages.collect import collect_cfg

    cfg = compose_cfg(["backbone=gpt-4o", "logger=wandb", "agent.T_max=4", "agent.n_agents=2"])
    run = start(cfg, "evaluate", Run(spec(cfg), "evaluate")).kwargs
    assert run["name"] == Run(spec(cfg), "evaluate").name
    assert run["name"].startswith("biokg-synthetic-test-gpt-4o-none-T4A2-")
    assert run["tags"] == ["biokg", "synthetic", "test", "bm25", "gpt-4o", "none", "T4", "A2"]
    assert run["job_type"] == "evaluate" and run["group"] is None and run["mode"] == "disabled"
    run = start(cfg, "baseline", Run(spec(cfg), "baseline")).kwargs
    assert run["name"] == Run(spec(cfg), "baseline").name and run["tags"] == ["biokg", "synthetic", "test", "bm25"]
    # a hosted backbone is named by the model it called, not by its config file
    fake = compose_cfg(["backbone=gpt-4o", "logger=wandb", "backbone.model=openai/fake", "agent.T_max=4",
                        "agent.n_agents=2"])
    run = start(fake, "evaluate", Run(spec(fake), "evaluate")).kwargs
    assert run["name"].startswith("biokg-synthetic-test-openai_fake-none-T4A2-") and "openai_fake" in run["tags"]
    run = start(cfg, "collect", Run(spec(collect_cfg(cfg)), "collect")).kwargs  # as ark.stages.collect.main starts it
    assert run["name"] == Run(spec(collect_cfg(cfg)), "collect").name and run["name"].split("-")[2] == cfg.collect.split


def test_other_stages_are_named_after_what_they_build(runs):
    cfg = compose_cfg(["logger=wandb", "dataset=biokg_lpo"])
    assert start(cfg, "build_index").kwargs["name"] == "build_index-biokg_lpo-bm25"
    assert start(cfg, "distill").kwargs["name"] == "distill-biokg_lpo-smoke"
    assert start(cfg, "build_graph").kwargs["tags"] == ["biokg_lpo"]
    assert start(cfg, "report").kwargs["name"] == "report"


def test_group_precedence_logger_group_then_environment(runs, monkeypatch):
    cfg = compose_cfg(["logger=wandb"])
    monkeypatch.setenv("ARK_WANDB_GROUP", "repro-20260101-120000")  # as `make repro` sets it
    assert start(cfg, "baseline").kwargs["group"] == "repro-20260101-120000"
    assert start(compose_cfg(["logger=wandb", "logger.group=mine"]), "baseline").kwargs["group"] == "mine"


def multirun(monkeypatch, tmp_path, *overrides):
    """Run a Hydra ``--multirun`` over conf/ in this process; each job starts an evaluate W&B run."""
    import hydra

    from ark.build import spec
    from ark.runs.store import Run
    from ark.tracking import stage_run

    @hydra.main(version_base="1.3", config_path=str(ROOT / "conf"), config_name="config")
    def job(cfg):
        with stage_run(cfg, "evaluate", Run(spec(cfg), "evaluate")):  # as ark.stages.evaluate.main starts it
            pass

    monkeypatch.setattr(sys, "argv", ["evaluate", "--multirun", "backbone=gpt-4o", f"paths.logs={tmp_path}",
                                      "hydra/job_logging=none", "hydra/hydra_logging=none", "hydra.job.name=evaluate",
                                      *overrides])
    job()


@pytest.mark.e2e
def test_the_jobs_of_one_multirun_share_a_group_of_their_own(runs, monkeypatch, tmp_path, no_hydra_config):
    multirun(monkeypatch, tmp_path, "seed=0,1", f"hydra.sweep.dir={tmp_path}/sweep-a")
    multirun(monkeypatch, tmp_path, "seed=0,1", f"hydra.sweep.dir={tmp_path}/sweep-b")
    groups = [r.kwargs["group"] for r in runs]
    assert groups[0] == groups[1] == "sweep-evaluate-sweep-a" and groups[2] == groups[3] != groups[0]
    assert runs[0].kwargs["name"] != runs[1].kwargs["name"]  # seed is in the identity
    monkeypatch.setenv("ARK_WANDB_GROUP", "repro-1")  # a sweep inside `make repro` joins the repro's group
    multirun(monkeypatch, tmp_path, "seed=0", f"hydra.sweep.dir={tmp_path}/sweep-c")
    assert runs[-1].kwargs["group"] == "repro-1" and "sweep-evaluate-sweep-c" in runs[-1].kwargs["tags"]


def test_logger_none_starts_no_run_and_a_failed_stage_is_marked_failed(runs):
    from ark.tracking import log_files, log_queries, log_summary, stage_run

    with stage_run(compose_cfg(["logger=none"]), "evaluate") as run:
        log_summary(run, {"hit@1": 1.0})
        log_queries(run, lambda: query_rows("/nonexistent"))  # not read with logging off
        log_files(run, [Path("/nonexistent.csv")], [])
    assert runs == []
    with pytest.raises(RuntimeError), stage_run(compose_cfg(["logger=wandb"]), "baseline"):
        raise RuntimeError("stage failed")
    assert runs[0].exit_code == 1


def scored_run_dir(root: Path) -> Path:
    """A run directory as evaluate leaves it: 3 queries, one of them with 2 agents, one incomplete."""
    from ark.io import write_jsonl
    from ark.agent.records import QueryRecord, Trajectory

    run_dir = root / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"stage": "evaluate"}))
    agent = Trajectory(agent=0, messages=[], steps=3, tool_calls={"search": 2, "neighbors": 1})
    records = [QueryRecord("q1", "slender fingers", [3], [agent, agent], wall_time=1.25),
               QueryRecord("q2", "lens of the eye", [4], [agent], wall_time=0.5),
               QueryRecord("q3", "zebra", [], [Trajectory(agent=0, messages=[], errors=["timeout"])])]
    write_jsonl(run_dir / "records.jsonl", (r.to_dict() for r in records))
    write_jsonl(run_dir / "scores.jsonl", [
        {"id": "q1", "complete": True, "hit@1": 1.0, "hit@5": 1.0, "recall@20": 1.0, "mrr": 1.0},
        {"id": "q2", "complete": True, "hit@1": 1.0, "hit@5": 1.0, "recall@20": 0.5, "mrr": 1.0},
        {"id": "q3", "complete": False, "hit@1": 0.0, "hit@5": 0.0, "recall@20": 0.0, "mrr": 0.0}])
    return run_dir


def test_the_per_query_table_has_one_row_per_query(runs, tmp_path):
    import wandb

    from ark.tracking import log_queries

    run = start(compose_cfg(["logger=wandb"]), "evaluate")
    log_queries(run, lambda: query_rows(scored_run_dir(tmp_path)))
    table = run.logged[0]["queries"]
    assert isinstance(table, wandb.Table) and len(table.data) == 3
    assert table.columns == ["query_id", "query", "hit@1", "hit@5", "recall@20", "mrr", "complete", "steps",
                             "tool_calls", "wall_time"]
    assert table.data[0] == ["q1", "slender fingers", 1.0, 1.0, 1.0, 1.0, True, 6, 6, 1.25]
    assert table.data[2][6:] == [False, 0, 0, None]  # no time recorded


def png_1x1() -> bytes:
    """A valid 1x1 grey PNG, written by hand."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x80")) + chunk(b"IEND", b""))


def test_log_files_logs_csv_tables_and_figures(runs, tmp_path):
    import wandb

    from ark.tracking import log_files

    (tmp_path / "main.csv").write_text("run,n,hit@1\nbm25,3,0.667\nrules,3,—\n")
    (tmp_path / "curve.png").write_bytes(png_1x1())
    run = start(compose_cfg(["logger=wandb"]), "report")
    log_files(run, [tmp_path / "main.csv"], [tmp_path / "curve.png"])
    logged = run.logged[0]
    assert logged["tables/main"].data == [["bm25", 3, "0.667"], ["rules", 3, "—"]]  # one type per column
    assert isinstance(logged["figures/curve"], wandb.Image)


@pytest.mark.e2e  # a W&B offline run
def test_no_secret_reaches_wandb_offline(tmp_path, monkeypatch):
    """A key in the environment appears in nothing W&B writes, even when a config interpolates it."""
    from ark.tracking import log_files, log_queries, log_summary, stage_run

    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("WANDB_MODE", "offline")
    # W&B records the program's command line: a key in an override or in a URL must not reach its run file
    monkeypatch.setattr(sys, "argv", ["evaluate", f"+backbone.api_key={CANARY}-arg",
                                      f"hydra.x=http://user:{CANARY}-url@example.org/v1?api_key={CANARY}-query"])
    cfg = compose_cfg([f"paths.logs={tmp_path}/logs", "logger=wandb", "backbone=gpt-4o",
                       "+backbone.api_key=${oc.env:OPENAI_API_KEY}", "+llm.headers=[${oc.env:OPENAI_API_KEY}]"])
    (tmp_path / "t.csv").write_text("a\n1\n")
    with stage_run(cfg, "evaluate") as run:
        log_summary(run, {"hit@1": 0.5, "note": f"Bearer {CANARY}"})
        log_queries(run, lambda: query_rows(scored_run_dir(tmp_path)))
        log_files(run, [tmp_path / "t.csv"], [])
    written = [p for p in (tmp_path / "logs" / "wandb").rglob("*") if p.is_file()]
    blob = b"".join(p.read_bytes() for p in written)
    assert any(p.suffix == ".wandb" for p in written) and b"[redacted]" in blob and b"slender fingers" in blob
    assert CANARY.encode() not in blob
    assert json.dumps(run.config.as_dict()).count("[redacted]") == 2
