"""DVC reruns only what a change touches (dvc.yaml, deps.yaml). Fast: no stage of the resolved pipeline depends on a
file no entry reads (its deps and params, as DVC resolves them). Slow (``make test-all``): in a copy of the project
whose every output is faked and committed as up to date, an edit to a file no entry reads changes no stage in
``dvc status``, and one to a file an entry reads changes that entry."""
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


def changed(repo_dir: Path) -> set[str]:
    """The stages of the root dvc.yaml that ``dvc status`` lists."""
    from dvc.repo import Repo

    with contextlib.chdir(repo_dir), Repo(".") as repo:  # DVC reads targets from the working directory
        return set(repo.status(targets=["dvc.yaml"]))


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> Path:
    """A copy of the root pipeline with every output faked and committed (``dvc commit -f``): up to date."""
    from dvc.repo import Repo

    base = tmp_path_factory.mktemp("pipeline")
    for name in COPIED:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, base / name)
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=base, check=True)
    with contextlib.chdir(base), Repo(".") as repo:
        for stage in repo.index.stages:
            for path in [Path(o.fs_path) for o in stage.outs] + [Path(d.fs_path) for d in stage.deps]:
                if path.exists():
                    continue
                if path.suffix:  # a file (metrics.json, a config file)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text("{}\n")
                else:  # a directory
                    path.mkdir(parents=True, exist_ok=True)
                    (path / "faked").write_text(str(path))
        repo.commit(force=True)
    assert changed(base) == set()
    return base


@pytest.fixture
def project(committed, tmp_path) -> Path:
    copy = tmp_path / "project"
    shutil.copytree(committed, copy, symlinks=True)
    return copy


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


@pytest.mark.slow  # dvc status over a faked copy: ~70 s; the fast check above covers the same files
def test_an_unused_backbone_file_reruns_nothing(project):
    append(project / "conf/backbone/gpt-5.2.yaml", "# an edit\nmax_tokens: 7\n")
    assert changed(project) == set()


@pytest.mark.slow  # dvc status over a faked copy: ~70 s; the fast check above covers the same files
def test_the_stark_loaders_rerun_no_stage_of_the_root_pipeline(project):
    append(project / "src/ark/data/stark.py", "# an edit\n")
    assert changed(project) == set()


@pytest.mark.slow  # dvc status over a faked copy: ~70 s; the fast check above covers the same files
def test_a_selected_config_file_reruns_the_entries_that_compose_it(project):
    append(project / "conf/backbone/rules.yaml", "an_added_setting: 7\n")
    stages = changed(project)
    assert {"evaluate@rules-synthetic", "evaluate@ark-synthetic"} <= stages  # rules_sampled extends rules
    assert not {s for s in stages if s.startswith(("baseline", "build_", "download", "make_queries"))}


@pytest.mark.slow  # dvc status over a faked copy: ~70 s; the fast check above covers the same files
def test_a_source_file_reruns_only_the_entries_whose_classes_are_in_it(project):
    append(project / "src/ark/data/synthetic.py", "# an edit\n")
    stages = changed(project)
    assert {"evaluate@rules-synthetic", "make_queries@synthetic", "baseline@synthetic-bm25"} <= stages
    assert "evaluate@rules-phenopackets" not in stages and "baseline@phenopackets-bm25" not in stages


def test_a_rules_run_over_bm25_does_not_wait_for_the_dense_index(dependencies):
    rules = upstream(dependencies, "evaluate@rules-synthetic")
    assert "build_index@biokg-bm25" in rules and not {s for s in rules if "dense" in s}, sorted(rules)
    dense = upstream(dependencies, "evaluate@dense-synthetic")
    assert "build_index@biokg-dense" in dense and "build_index@biokg-bm25" not in dense, sorted(dense)
