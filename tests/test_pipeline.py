"""The pipeline's wiring: DVC stages vs. Hydra configs, and stage run(cfg) on a tiny graph."""
import importlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ark.errors import UserError
from tests.conftest import compose_cfg

ROOT = Path(__file__).resolve().parents[1]


def dvc_stages():
    """(name, cmd, deps, params {file: keys or None for the whole file}) of every stage in dvc.yaml."""
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        out = []
        for s in repo.index.stages:
            params = {}
            for d in s.deps:
                if d.__class__.__name__ == "ParamsDependency":
                    params[d.def_path] = list(d.params) if d.params else None
            out.append((s.addressing, s.cmd, {d.def_path for d in s.deps}, params))
        return out


@pytest.mark.e2e  # every stage of dvc.yaml
def test_every_dvc_stage_tracks_what_its_results_depend_on_and_nothing_else():
    """Each conf group file a stage composes is a param (or, for an experiment row, inside a group directory that
    is a dependency); config.yaml only at key level; never the logger; every local input file the config names
    (e.g. the phenopacket source) is a dependency; the code it runs is its fingerprint in code.yaml, never a source
    file. Each entry's config as ``ark.stage_deps`` composes it (kept by
    conf/'s content)."""
    from ark.stage_deps import PIPELINES, entries

    stages = {name: (cmd, deps, params) for name, cmd, deps, params in dvc_stages()}
    found = {("" if p.parent == ROOT else f"{p.relative_to(ROOT)}:") + e.name: e
             for p in PIPELINES for group in entries(p).values() for e in group}
    assert {name.split("@")[0] for name in stages} >= {"download", "build_graph", "build_index", "make_queries",
                                                       "baseline", "collect", "distill", "evaluate", "report"}
    assert set(found) == set(stages)
    for name, (cmd, deps, params) in stages.items():
        argv = shlex.split(cmd)
        assert argv[:2] == ["python", "-m"] and argv[2].startswith("ark.stages."), name
        module = importlib.import_module(argv[2])
        code = "stark/code.yaml" if name.startswith("stark/") else "code.yaml"  # its code: a fingerprint, no file
        assert params.get(code) == [name.split(":")[-1].replace("@", ".")], f"{name}: no code fingerprint param"
        assert not any(d.startswith("src/") and d.endswith(".py") for d in deps), f"{name}: depends on a source file"
        assert params.get("conf/config.yaml", []) is not None, f"{name}: conf/config.yaml tracked as a whole file"
        assert not any(p.startswith(("conf/logger/", "conf/paths/")) for p in params), name
        choices = found[name].config["choices"]
        groups = list(module.GROUPS) + (["experiment"] if choices.get("experiment") else [])
        for group in groups:
            path = f"conf/{group}/{choices[group]}.yaml"
            assert path in params or any(path.startswith(f"{d}/") for d in deps), \
                f"{name}: {path} is composed but not a param"
        source = found[name].config["source"]
        if source and name.startswith("make_queries") and not source.startswith("http"):
            assert any(Path(source) == Path(d) or Path(d) in Path(source).parents for d in deps), f"{name}: {source}"


def test_run_stages_identity_settings_are_params():
    """Every setting in a run stage's identity is tracked: groups as params files, scalars as config.yaml keys."""
    from ark.build import RUN_STAGES
    from ark.runs.identity import config_groups, identity_fields

    for name, cmd, deps, params in dvc_stages():
        stage = name.split("@")[0]
        if stage not in RUN_STAGES:
            continue
        tracked = set(params.get("conf/config.yaml") or [])
        for key in (f.metadata["key"] or f.name for f in identity_fields(stage)):
            if key in config_groups(stage):
                assert any(p.startswith(f"conf/{key}/") for p in params) or f"conf/{key}" in deps, \
                    f"{name}: group {key} not tracked"
            else:
                assert key in tracked or key.split(".")[0] in tracked, f"{name}: {key} not tracked"


@pytest.mark.e2e
def test_dvc_pipeline_parses_into_one_chain():
    """`dvc dag` parses dvc.yaml (templating, foreach, params) without data, as in a clean clone."""
    out = subprocess.run([sys.executable, "-m", "dvc", "dag", "--md"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    for stage in ("download", "build_graph@biokg_lpo", "build_index@biokg-bm25", "make_queries@synthetic",
                  "baseline@synthetic-bm25", "baseline@phenopackets-lpo-bm25",
                  "evaluate@rules-synthetic", "collect@rules-synthetic", "distill",
                  "evaluate@student-synthetic", "report"):
        assert stage in out.stdout


# every entry of both pipelines composed: ~7 CPU-s (CI's make deps CHECK=1 also checks the generated files)
@pytest.mark.e2e
def test_every_params_key_is_in_its_file():
    """DVC reads a stage's params from the file itself (not as Hydra composes it): a key the file lacks stops
    ``dvc repro`` at that stage ("Parameters 'kind' are missing"), which ``dvc status`` does not notice."""
    missing = []
    for name, _, _, params in dvc_stages():
        for path, keys in params.items():
            values = yaml.safe_load((ROOT / path).read_text()) if (ROOT / path).is_file() else None
            for key in keys or ():
                node = values
                for part in key.split("."):
                    node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
                if node is KeyError:
                    missing.append(f"{name}: {path}:{key}")
    assert missing == []


@pytest.mark.e2e
def test_dvc_lock_records_only_the_stages_of_dvc_yaml():
    """DVC keeps the lock entries of removed or renamed stages, and rereads and rewrites the whole lock after every
    stage: stale entries cost every stage of a cold run (27 of them were 23 % of dvc.lock). Prune with
    ``dvc.utils.serialize.modify_yaml`` (it keeps DVC's own format)."""
    names = {name for name, _, _, _ in dvc_stages() if ":" not in name}  # stark/dvc.yaml's are `stark/dvc.yaml:x`
    locked = set(yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"])
    assert sorted(locked - names) == []


def test_the_distill_stage_declares_every_adapter_its_recipe_writes():
    """DVC keeps only declared outputs: the student and one sibling directory per budget of its recipe."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["distill"]
    cmd = " ".join(stage["cmd"].split())
    recipe = re.search(r"distill=(\S+)", cmd).group(1)
    out = Path(re.search(r"distill\.out=(\S+)", cmd).group(1))
    publish = Path(re.search(r"distill\.publish=(\S+)", cmd).group(1))
    budgets = yaml.safe_load((ROOT / "conf" / "distill" / f"{recipe}.yaml").read_text())["budgets"]
    names = [out.name, *budgets]
    outs = [o if isinstance(o, str) else next(iter(o)) for o in stage["outs"]]
    assert sorted(outs) == sorted([str(out.parent / n) for n in names]
                                  + [str(publish.parent / n / f) for n in names for f in ("report.json", "README.md")])
    assert sorted(next(iter(p)) for p in stage["plots"]) == sorted(str(publish.parent / n / "curve.json")
                                                                   for n in names)


def test_build_index_then_baseline(tiny_project):
    from ark.stages import baseline, build_index

    cfg = compose_cfg(tiny_project + ["retriever.params.stemmer=null"])
    info = build_index.run(cfg)
    saved = json.loads(Path(cfg.dataset.index_dir, "info.json").read_text())
    assert info["num_docs"] == 31 and "build_seconds" not in saved  # no build time: a rebuild is byte-identical
    assert saved["settings"] == {"name": "bm25", "params": {**cfg.retriever.params}}  # what runs check against
    metrics = baseline.run(cfg)
    assert metrics["n_queries"] == 3
    assert metrics["hit@1"] == pytest.approx(2 / 3)  # q1 and q2 found first, 'zebra' matches nothing
    assert metrics["recall@20"] == pytest.approx((1 + 0.5 + 0) / 3)
    out = Path(metrics["run_dir"])
    records = [json.loads(line) for line in open(out / "records.jsonl")]
    assert [r["id"] for r in records] == ["q1", "q2", "q3"] and records[2]["ranking"] == []
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["hit@1"] == metrics["hit@1"] and all(isinstance(v, (int, float)) for v in saved.values())
    provenance = json.loads((out / "provenance.json").read_text())
    assert "bm25s" in provenance["versions"] and "platform" not in json.dumps(provenance)
    assert any(p.endswith("test.jsonl") for p in provenance["data"])
    assert (out / "config.yaml").exists() and "retriever" in (out / "config.yaml").read_text()


def test_baseline_without_index_fails_clearly(tiny_project):
    from ark.stages import baseline

    with pytest.raises(UserError, match="build_index"):
        baseline.run(compose_cfg(tiny_project))


def test_make_queries_reads_stark_qa(tmp_path, shared_dir):
    from ark.stages import make_queries

    qa_dir = shared_dir / "stark" / "git_history_f899c43parent" / "data" / "primekg"  # a folder of STaRK's QA layout
    cfg = compose_cfg([f"paths.data={tmp_path}", f"queries.qa_dir={qa_dir}", "dataset=stark_prime",
                       "queries=stark", "logger=none"])
    result = make_queries.run(cfg)
    assert result["queries"] == {"train": 6162, "val": 2241, "test": 2801}
    assert (Path(cfg.dataset.queries_dir) / "stats.json").exists()


@pytest.mark.e2e
def test_wandb_logs_offline_into_the_configured_dir(tmp_path, monkeypatch):
    from ark.tracking import stage_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = compose_cfg([f"paths.logs={tmp_path}", "logger=wandb"])
    with stage_run(cfg, "test") as run:
        run.log({"hit@1": 0.5})
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


@pytest.mark.e2e  # a Python subprocess
def test_a_stage_with_bad_input_exits_2_with_one_clear_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ark.stages.baseline", f"paths.data={tmp_path}", "logger=none",
                          f"hydra.run.dir={tmp_path}/hydra"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("error: no graph at") and "Traceback" not in out.stderr
