"""Beyond one machine: a sweep fans out through Hydra's submitit launcher with the same configs
(conf/hydra/launcher/cluster_local.yaml, the local-executor twin of the SLURM config `cluster`), each job writing its
own LLM cache file; the merged caches replay the whole sweep. Loopback only (ark.llm.fake)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ark.io import write_jsonl
from ark.llm.cache import ResponseCache
from ark.llm.cache_merge import merge
from tests.conftest import ROOT, compose_cfg
from ark.llm.fake import ScriptedEndpoint


@pytest.fixture
def project(tiny_project):
    from ark.stages import build_index

    overrides = tiny_project + ["retriever.params.stemmer=null"]
    cfg = compose_cfg(overrides)
    write_jsonl(Path(cfg.dataset.queries_dir) / "test.jsonl", [
        {"id": "q1", "query": "slender fingers", "answer_ids": [3]},
        {"id": "q2", "query": "lens of the eye", "answer_ids": [4]},
        {"id": "q3", "query": "tall stature", "answer_ids": [0]},
    ])
    build_index.run(cfg)
    return overrides


def sweep(project, url: str, out: Path, *extra) -> subprocess.CompletedProcess:
    """agent.T_max=1,2 through the submitit local executor; runs under ``out/runs``, Hydra's under ``out/sweep``."""
    args = [sys.executable, "-m", "ark.stages.evaluate", "--multirun", "hydra/launcher=cluster_local",
            "agent.T_max=1,2", *project, "backbone=gpt-4.1", "backbone.model=openai/fake", f"backbone.api_base={url}",
            "backbone.api_key_env=null", "agent.n_agents=1", "eval.progress=false", f"run.root={out}/runs",
            f"hydra.sweep.dir={out}/sweep", "hydra.sweep.subdir=${hydra.job.num}", *extra]
    # the jobs import this checkout's code, whatever the installed one
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path})


def runs(out: Path) -> dict[int, tuple[str, dict]]:
    """T_max -> (run directory name, metrics) of the sweep's runs."""
    found = {}
    for d in (out / "runs").iterdir():
        found[OmegaConf.load(d / "config.yaml").agent.T_max] = (d.name, json.loads((d / "metrics.json").read_text()))
    return found


@pytest.mark.e2e
def test_a_two_point_sweep_runs_through_submitit_and_its_merged_caches_replay_it(project, tmp_path):
    cache = tmp_path / "cache"
    endpoint = ScriptedEndpoint()  # search the question, then answer with the first node shown
    with endpoint.serve() as server:  # one server: its address is part of every cache key
        first = sweep(project, server.url, tmp_path / "first", f"llm.cache={cache}/llm-${{hydra:job.num}}.sqlite")
        assert first.returncode == 0, first.stderr[-3000:]
        # two jobs, each run by submitit in a process of its own
        assert len(list((tmp_path / "first" / "sweep" / ".submitit").glob("*/*_result.pkl"))) == 2
        done = runs(tmp_path / "first")
        assert sorted(done) == [1, 2] and done[1][0] != done[2][0]  # distinct run identities
        assert done[1][1]["n_queries"] == done[2][1]["n_queries"] == 3
        assert done[1][1]["hit@1"] == 0.0 < done[2][1]["hit@1"]  # T_max 1 only searches; T_max 2 answers
        assert endpoint.calls == 3 * 1 + 3 * 2
        workers = [cache / "llm-0.sqlite", cache / "llm-1.sqlite"]
        assert sorted(len(ResponseCache(w)) for w in workers) == [3, 6]  # each job wrote its own file

        assert merge(cache / "llm.sqlite", workers) == {"files": 2, "rows": 9, "added": 9}
        # the next sweep's workers read the merged cache and write files of their own: nothing is asked again
        again = sweep(project, server.url, tmp_path / "again", f"llm.cache={cache}/next-${{hydra:job.num}}.sqlite",
                      f"llm.cache_base={cache}/llm.sqlite")
        assert again.returncode == 0, again.stderr[-3000:]
        assert endpoint.calls == 9
    assert runs(tmp_path / "again") == done
    assert [len(ResponseCache(cache / f"next-{i}.sqlite")) for i in (0, 1)] == [0, 0]


def test_the_slurm_launcher_and_its_local_twin_compose_over_the_same_configs():
    slurm = compose_cfg(["hydra/launcher=cluster"], hydra_config=True)
    local = compose_cfg(["hydra/launcher=cluster_local"], hydra_config=True)
    assert slurm.hydra.launcher._target_.endswith("SlurmLauncher")
    assert local.hydra.launcher._target_.endswith("submitit_launcher.LocalLauncher")
    for key in ("timeout_min", "cpus_per_task"):
        assert slurm.hydra.launcher[key] == local.hydra.launcher[key], key
    # the launcher changes where jobs run, never what they compute
    without_hydra = [{k: v for k, v in cfg.items() if k != "hydra"} for cfg in (slurm, local)]
    assert without_hydra[0] == without_hydra[1] == dict(compose_cfg([]))
