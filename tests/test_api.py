"""The Python API from another directory: the README's example on the tiny graph, run from a directory below the
project and from one outside it."""
from pathlib import Path

import pytest

from ark import build
from ark.api import compose, find_root
from ark.errors import UserError
from ark.runs.execute import agents
from tests.conftest import compose_cfg


@pytest.fixture
def project(tiny_project, tmp_path, monkeypatch):
    """A project root (tmp_path: dvc.yaml, conf/config.yaml, the tiny graph under data/) and the overrides that make
    its biokg the tiny graph, without saying where the root is."""
    from ark.stages import build_index

    build_index.run(compose_cfg(tiny_project + ["retriever.params.stemmer=null"]))
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text("# marks the project root\n")
    monkeypatch.delenv("ARK_ROOT", raising=False)
    monkeypatch.delenv("PROJECT_ROOT", raising=False)
    return tmp_path, ["logger=none", "retriever.params.stemmer=null", "backbone=rules", "agent.n_agents=1"]


def ranking(overrides, root=None) -> list[str]:
    spec = build.spec(compose(overrides, root=root))
    with agents(spec) as team:
        record = team.one({"id": "q1", "query": "slender fingers"})
    graph = team.tools.graph
    return [graph.name[v] for v in record.ranking[:3]]


@pytest.mark.e2e  # the README's example, three times
def test_the_example_runs_from_below_the_root_and_from_outside_it(project, tmp_path, monkeypatch):
    root, overrides = project
    (root / "notebooks" / "deep").mkdir(parents=True)
    monkeypatch.chdir(root / "notebooks" / "deep")
    assert find_root() == root.resolve()
    from_below = ranking(overrides)
    assert from_below and "Arachnodactyly" in from_below
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert ranking(overrides, root=root) == from_below
    monkeypatch.setenv("ARK_ROOT", str(root))
    assert ranking(overrides) == from_below


def test_a_missing_graph_names_the_root_it_looked_in(project, tmp_path, monkeypatch):
    root, overrides = project
    empty = tmp_path.parent / f"{tmp_path.name}-empty"
    empty.mkdir()
    with pytest.raises(UserError, match=str(empty.resolve() / "data" / "graph")):
        build.spec(compose(overrides, root=empty))
        ranking(overrides, root=empty)
    with pytest.raises(UserError, match="not a directory"):
        find_root(empty / "nowhere")


def test_outside_any_project_the_installed_clone_is_the_root(tmp_path, monkeypatch):
    monkeypatch.delenv("ARK_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert find_root() == Path(__file__).resolve().parents[1]
