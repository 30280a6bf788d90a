"""DVC reruns only what a change touches (dvc.yaml, deps.yaml): no stage of the resolved pipeline depends on a file no
entry reads (its deps and params, as DVC resolves them); and in a copy of the project with the committed lock,
``dvc status`` after an edit lists exactly the entries that run the edited file."""
import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COPIED = ["dvc.yaml", "params.yaml", "deps.yaml", "conf", "src", "notebooks", "data/sources"]


@pytest.fixture(scope="module")
def dependencies() -> dict[str, tuple[set[Path], set[Path]]]:
    """{stage: (the paths it depends on: deps and params files, its outputs)} of the root pipeline, as DVC resolves
    it."""
    from dvc.repo import Repo

    def rel(items) -> set[Path]:
        return {Path(i.fs_path).relative_to(ROOT) for i in items}

    with contextlib.chdir(ROOT), Repo(".") as repo:
        return {s.addressing: (rel(s.deps), rel(s.outs)) for s in repo.index.stages if s.path_in_repo == "dvc.yaml"}


def covers(paths: set[Path], p: Path) -> bool:
    return any(d == p or d in p.parents for d in paths)


def upstream(dependencies, stage: str) -> set[str]:
    """The stages whose outputs ``stage`` reads (an output at, above or below one of its deps), and theirs."""
    at, below = {}, {}  # output path -> its stage; a directory above an output -> the stages below it
    for other, (_, outs) in dependencies.items():
        for o in outs:
            at[o] = other
            for parent in o.parents:
                below.setdefault(parent, set()).add(other)
    found, todo = set(), [stage]
    while todo:
        for d in dependencies[todo.pop()][0]:
            producers = {at[p] for p in (d, *d.parents) if p in at} | below.get(d, set())
            todo += sorted(producers - found)
            found |= producers
    return found


def stages_reading(dependencies, path: str) -> set[str]:
    """The stages that depend on ``path``: on the file itself or on a directory holding it."""
    return {stage for stage, (deps, _) in dependencies.items() if covers(deps, Path(path))}


def test_no_stage_depends_on_an_unused_backbone_file_or_the_stark_loaders(dependencies):
    assert len(dependencies) > 50  # the resolved foreach entries
    assert stages_reading(dependencies, "conf/backbone/gpt-5.2.yaml") == set()
    assert stages_reading(dependencies, "src/ark/data/stark.py") == set()
    assert {"evaluate@rules-synthetic", "evaluate@ark-synthetic"} <= stages_reading(dependencies,
                                                                                   "conf/backbone/rules.yaml")
    assert "evaluate@rules-synthetic" in stages_reading(dependencies, "src/ark/agent/policies.py")


def status(repo_dir: Path) -> dict[str, set[str]]:
    """{stage of the root dvc.yaml that ``dvc status`` lists: the deps and params files it names as changed}."""
    from dvc.repo import Repo

    with contextlib.chdir(repo_dir), Repo(".") as repo:  # DVC reads targets from the working directory
        found = repo.status(targets=["dvc.yaml"])
    out = {}
    for stage, changes in found.items():
        named = set()  # a changed params file is listed under the file's name
        for change in changes:
            if isinstance(change, dict):
                for kind, paths in change.items():
                    named |= set(paths) if isinstance(paths, dict) else {kind}
            else:
                named.add(str(change))
        out[stage] = named
    return out


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> Path:
    """A copy of the root pipeline's code, config and committed ``dvc.lock``, without data: after an edit, a stage
    that depends on the edited file names it among its changes whatever else the copy lacks."""
    base = tmp_path_factory.mktemp("pipeline")
    for name in COPIED + ["dvc.lock"]:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, base / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, base / name)
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=base, check=True)
    return base


EDITS = {  # file -> what is appended (a comment: no result can depend on it)
    "src/ark/llm/decoding.py": "# an edit\n", "src/ark/index/dense.py": "# an edit\n",
    "src/ark/agent/policies.py": "# an edit\n", "src/ark/report/tables/table5.py": "# an edit\n",
    "src/ark/data/stark.py": "# an edit\n", "conf/backbone/gpt-5.2.yaml": "# an edit\nmax_tokens: 7\n",
    "src/ark/data/synthetic.py": "# an edit\n", "conf/backbone/rules.yaml": "an_added_setting: 7\n",
}


def stale_by_edit(found: dict[str, set[str]]) -> dict[str, set[str]]:
    """{edited file: the stages DVC lists for it (a changed dep at the file or a directory holding it)}."""
    return {f: {s for s, named in found.items() if any(f == n or f.startswith(f"{n}/") for n in named)}
            for f in EDITS}


def test_an_edit_reruns_exactly_the_entries_that_run_the_edited_module(committed):
    """In a copy with the committed lock, one ``dvc status`` after a comment appended to each of several files: DVC's
    own list of the stages that name the file among their changes, per file, against what each entry really runs."""
    for path, text in EDITS.items():
        (committed / path).write_text((committed / path).read_text() + text)
    stale = stale_by_edit(status(committed))
    agent_free = ("baseline@", "hpo_baseline@", "evaluate@rules-", "evaluate@ark_v1-")
    # the embedded model's grammar decoding: only runs on the embedded model (its base, students, ARK on it)
    assert not {s for s in stale["src/ark/llm/decoding.py"] if s.startswith(agent_free)}
    assert {"evaluate@student-synthetic", "evaluate@base-synthetic"} <= stale["src/ark/llm/decoding.py"]
    # the dense index: only what builds or reads it
    assert stale["src/ark/index/dense.py"] and all("dense" in s for s in stale["src/ark/index/dense.py"])
    assert "build_index@biokg-dense" in stale["src/ark/index/dense.py"]
    # the policies: every agent run, no baseline
    assert {"evaluate@rules-synthetic", "evaluate@student-synthetic"} <= stale["src/ark/agent/policies.py"]
    assert not {s for s in stale["src/ark/agent/policies.py"] if s.startswith(("baseline@", "hpo_baseline@"))}
    assert stale["src/ark/report/tables/table5.py"] == {"report"}
    # the STaRK loaders and an unused backbone file: nothing of the root pipeline
    assert stale["src/ark/data/stark.py"] == set() and stale["conf/backbone/gpt-5.2.yaml"] == set()
    # the synthetic query generator: its query set and what reads it; a selected config file: who composes it
    synthetic = stale["src/ark/data/synthetic.py"]
    assert {"evaluate@rules-synthetic", "make_queries@synthetic", "baseline@synthetic-bm25"} <= synthetic
    assert "evaluate@rules-phenopackets" not in synthetic and "baseline@phenopackets-bm25" not in synthetic
    rules = stale["conf/backbone/rules.yaml"]
    assert {"evaluate@rules-synthetic", "evaluate@ark-synthetic"} <= rules  # rules_sampled extends rules
    assert not {s for s in rules if s.startswith(("baseline", "build_", "download", "make_queries"))}
    print({f: len(s) for f, s in stale.items()})


def test_a_rules_run_over_bm25_does_not_wait_for_the_dense_index(dependencies):
    rules = upstream(dependencies, "evaluate@rules-synthetic")
    assert "build_index@biokg-bm25" in rules and not {s for s in rules if "dense" in s}, sorted(rules)
    dense = upstream(dependencies, "evaluate@dense-synthetic")
    assert "build_index@biokg-dense" in dense and "build_index@biokg-bm25" not in dense, sorted(dense)
