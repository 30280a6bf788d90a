"""DVC reruns only what a change touches (dvc.yaml, deps.yaml, code.yaml): no stage of the resolved pipeline depends on
a file no entry reads or on a source file (its code is its fingerprint); and in a copy of the project with the committed
lock, ``dvc status`` after edits lists exactly the entries whose code changed in behaviour."""
import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COPIED = ["dvc.yaml", "params.yaml", "deps.yaml", "code.yaml", "conf", "src", "notebooks", "data/sources"]


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


@pytest.mark.e2e  # every stage of dvc.yaml
def test_no_stage_depends_on_a_source_file_or_an_unused_backbone_file(dependencies):
    """Code enters a stage as its fingerprint (code.yaml), never as a file: no stage depends on anything in src/ but
    the paper's numbers (a data file the report reads)."""
    assert len(dependencies) > 50  # the resolved foreach entries
    assert not {s for s, (deps, _) in dependencies.items()
                if any(Path("src") in (d, *d.parents) and d.suffix != ".csv" for d in deps)}
    assert stages_reading(dependencies, "src/ark/report/paper_numbers.csv") == {"report"}  # data, not code
    assert all(covers(deps, Path("code.yaml")) for deps, _ in dependencies.values())
    assert stages_reading(dependencies, "conf/backbone/gpt-5.2.yaml") == set()
    assert {"evaluate@rules-synthetic", "evaluate@ark-synthetic"} <= stages_reading(dependencies,
                                                                                   "conf/backbone/rules.yaml")


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
    """A copy of the root pipeline's code, config and committed ``dvc.lock``, without data, whose lock holds each
    stage's fingerprint as code.yaml holds it now (as a lock made with this code does): after an edit, a stage names
    code.yaml among its changes exactly where its fingerprint changed, whatever else the copy lacks."""
    import yaml

    base = tmp_path_factory.mktemp("pipeline")
    for name in COPIED + ["dvc.lock"]:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, base / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, base / name)
    code = yaml.safe_load((ROOT / "code.yaml").read_text())
    lock = yaml.safe_load((base / "dvc.lock").read_text())
    for name, entry in lock["stages"].items():
        stage, _, key = name.partition("@")
        entry.setdefault("params", {})["code.yaml"] = {f"{stage}.{key}" if key else stage:
                                                        code[stage][key] if key else code[stage]}
    (base / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False))
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=base, check=True)
    return base


@pytest.mark.e2e
def test_a_comment_anywhere_reruns_nothing_and_a_change_in_the_agent_loop_reruns_no_baseline(committed):
    """In the copy, one ``dvc status`` after a comment appended to every module of src/ark, one statement added to
    the agent loop (``run_agent``) and two config edits, with code.yaml rewritten as ``make deps`` would: the stages
    that name code.yaml are exactly those whose code runs the agent loop (no baseline, no data stage); the config
    edits rerun who composes the edited file."""
    import ast

    import yaml

    from ark import stage_deps

    before = status(committed)
    assert not {s for s, named in before.items() if "code.yaml" in named}
    edited = {}
    for path in sorted((committed / "src" / "ark").rglob("*.py")):
        module = ".".join(path.relative_to(committed / "src").with_suffix("").parts).removesuffix(".__init__")
        text = path.read_text() + "# an edit\n"
        if module == "ark.agent.loop":
            tree = ast.parse(text)
            loop = next(n for n in tree.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "run_agent")
            loop.body.insert(0, ast.parse("T_max = T_max + 0").body[0])
            text = ast.unparse(tree)
        path.write_text(text)
        edited[module] = text
    with stage_deps.edited(edited):
        code = stage_deps.code(ROOT / "dvc.yaml")
    (committed / "code.yaml").write_text(yaml.safe_dump(code, sort_keys=False, width=120))
    for path, text in {"conf/backbone/gpt-5.2.yaml": "# an edit\nmax_tokens: 7\n",
                       "conf/backbone/rules.yaml": "an_added_setting: 7\n"}.items():
        (committed / path).write_text((committed / path).read_text() + text)
    after = status(committed)
    rerun = {s for s, named in after.items() if "code.yaml" in named}
    assert {"evaluate@rules-synthetic", "evaluate@student-synthetic", "collect@rules-synthetic",
            "budget@synthetic"} <= rerun
    assert not {s for s in rerun if s.startswith(("baseline@", "hpo_baseline@", "download@", "build_graph@",
                                                  "build_index@", "make_queries@", "distill"))}
    rules = {s for s, named in after.items() if "conf/backbone/rules.yaml" in named}
    assert {"evaluate@rules-synthetic", "evaluate@ark-synthetic"} <= rules  # rules_sampled extends rules
    assert not {s for s in rules if s.startswith(("baseline", "build_", "download", "make_queries"))}
    assert not {s for s, named in after.items() if "conf/backbone/gpt-5.2.yaml" in named}
    print(f"{len(rerun)} of {len(after)} stages rerun: {sorted(rerun)}")


def test_a_rules_run_over_bm25_does_not_wait_for_the_dense_index(dependencies):
    rules = upstream(dependencies, "evaluate@rules-synthetic")
    assert "build_index@biokg-bm25" in rules and not {s for s in rules if "dense" in s}, sorted(rules)
    dense = upstream(dependencies, "evaluate@dense-synthetic")
    assert "build_index@biokg-dense" in dense and "build_index@biokg-bm25" not in dense, sorted(dense)
