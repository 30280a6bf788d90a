"""The README's DVC remote recipe on a tiny project: `dvc remote add -d`, `dvc push`, then a fresh git clone that
`dvc pull`s the results and has nothing left to recompute."""
import os
import subprocess
import sys
from pathlib import Path

STAGE = """stages:
  make:
    cmd: python make.py
    deps: [make.py]
    outs: [results/runs]
    metrics: [{results/metrics.json: {cache: false}}]
"""
MAKE = """import json, os, pathlib
count = pathlib.Path(os.environ["ARK_TEST_COUNT"])
count.write_text(str(int(count.read_text() or 0) + 1) if count.exists() else "1")
pathlib.Path("results/runs/a").mkdir(parents=True, exist_ok=True)
pathlib.Path("results/runs/a/records.jsonl").write_text('{"id": "q1"}\\n')
pathlib.Path("results/metrics.json").write_text(json.dumps({"hit@1": 0.5}))
"""


def run(cwd: Path, *args: str, env: dict) -> str:
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(args)}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out.stdout


def test_a_clone_pulls_the_results_from_a_local_remote_instead_of_recomputing_them(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "ARK_TEST_COUNT": str(tmp_path / "runs-made"), "DVC_NO_ANALYTICS": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    dvc = [sys.executable, "-m", "dvc"]
    project, clone = tmp_path / "project", tmp_path / "clone"
    project.mkdir()
    (project / "dvc.yaml").write_text(STAGE)
    (project / "make.py").write_text(MAKE)
    run(project, "git", "init", "-q", env=env)
    run(project, *dvc, "init", "-q", env=env)
    run(project, *dvc, "repro", "-q", env=env)
    run(project, *dvc, "remote", "add", "-d", "storage", str(tmp_path / "remote"), env=env)
    run(project, *dvc, "push", "-q", env=env)
    run(project, "git", "add", "-A", env=env)
    run(project, "git", "commit", "-q", "-m", "results", env=env)

    run(tmp_path, "git", "clone", "-q", str(project), str(clone), env=env)
    assert not (clone / "results" / "runs").exists()  # DVC outputs are not in git
    run(clone, *dvc, "pull", "-q", env=env)
    assert (clone / "results/runs/a/records.jsonl").read_text() == '{"id": "q1"}\n'
    assert "up to date" in run(clone, *dvc, "status", env=env)
    run(clone, *dvc, "repro", "-q", env=env)
    assert (tmp_path / "runs-made").read_text() == "1"  # made once, in the first project only
