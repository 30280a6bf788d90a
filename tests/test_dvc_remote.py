"""Results a clone can pull: real stages (build_index, evaluate with the rules policy) on the tiny test graph in a
project of their own, `dvc push` to a directory remote, a second clone `dvc pull`s them, finds nothing to recompute
and `ark show` prints a query's trajectory there."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = """import sys
from ark.io import write_jsonl
from tests.helpers import tiny_graph
tiny_graph().save("data/graph/biokg")
write_jsonl("data/queries/biokg/synthetic/test.jsonl", [
    {"id": "q1", "query": "slender fingers", "answer_ids": [3]},
    {"id": "q2", "query": "lens of the eye", "answer_ids": [4, 0]},
])
"""
SETTINGS = "logger=none llm.cache=null hydra.run.dir=logs/hydra"
STAGES = f"""stages:
  tiny:
    cmd: python make_tiny.py
    deps: [make_tiny.py]
    outs: [data/graph/biokg, data/queries/biokg/synthetic]
  index:
    cmd: python -m ark.stages.build_index dataset=biokg retriever=bm25 {SETTINGS}
    deps: [data/graph/biokg]
    outs: [data/index/biokg/bm25]
  evaluate:
    cmd: >-
      python -m ark.stages.evaluate dataset=biokg queries=synthetic backbone=rules eval.progress=false {SETTINGS}
      run.root=results/runs/evaluate/rules run.publish=results/evaluate/rules
    deps: [data/graph/biokg, data/index/biokg/bm25, data/queries/biokg/synthetic]
    outs:
      - results/runs/evaluate/rules
      - results/evaluate/rules/metrics.json: {{cache: false}}
      - results/evaluate/rules/config.yaml: {{cache: false}}
      - results/evaluate/rules/stats.json: {{cache: false}}
      - results/evaluate/rules/provenance.json: {{cache: false}}
"""


def run(cwd: Path, *args: str, env: dict) -> str:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(args)}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out.stdout


@pytest.mark.e2e
def test_a_clone_pulls_the_results_from_a_directory_remote_and_shows_a_run(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "DVC_NO_ANALYTICS": "1", "WANDB_MODE": "disabled", "PROJECT_ROOT": ".",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    dvc = [sys.executable, "-m", "dvc"]
    project, clone = tmp_path / "project", tmp_path / "clone"
    project.mkdir()
    (project / "dvc.yaml").write_text(STAGES)
    (project / "make_tiny.py").write_text(TINY)
    (project / ".gitignore").write_text("logs/\ncache/\n")
    run(project, "git", "init", "-q", env=env)
    run(project, *dvc, "init", "-q", env=env)
    run(project, *dvc, "repro", "-q", env=env)
    run(project, *dvc, "remote", "add", "-d", "storage", str(tmp_path / "remote"), env=env)  # the one command
    run(project, *dvc, "push", "-q", env=env)
    run(project, "git", "add", "-A", env=env)
    run(project, "git", "commit", "-q", "-m", "results", env=env)

    run(tmp_path, "git", "clone", "-q", str(project), str(clone), env=env)
    assert not (clone / "results/runs/evaluate/rules").exists() and (clone / "results/evaluate/rules/metrics.json").exists()
    run(clone, *dvc, "pull", "-q", env=env)
    assert "Data and pipelines are up to date" in run(clone, *dvc, "status", env=env)
    shown = run(clone, sys.executable, "-m", "ark.cli", "show", "evaluate@rules", "q1", env=env)
    assert "query  #0 q1" in shown and "gold   1 node" in shown and "Arachnodactyly" in shown
