"""The STaRK pipeline (stark/dvc.yaml) end to end through `dvc repro`, on a tiny STaRK release
(tests/fixtures/stark_tiny.py) and the fake OpenAI-compatible endpoint (ark.llm.fake, loopback only).

It runs in a temporary no-SCM DVC project holding copies of conf/, stark/dvc.yaml with its generated deps.yaml
and code.yaml, and the paper's numbers the tables stage reads (the code that runs is the installed package's), with a stark/params.yaml that points the three datasets at
the fixture and the backbone at the fake endpoint."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ark.llm.fake import ScriptedEndpoint
from tests.fixtures.stark_tiny import write_stark_tiny

ROOT = Path(__file__).resolve().parents[1]
SKBS = ("amazon", "mag", "prime")


def dvc(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PROJECT_ROOT"}  # paths.root = the project (cwd)
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", DVC_NO_ANALYTICS="1",
               WANDB_MODE="disabled", LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1",
               OPENAI_API_KEY="sk-fake-for-tests", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=project, env=env, capture_output=True, text=True)
    assert out.returncode == 0, f"dvc {' '.join(args)}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def new_project(path: Path) -> Path:
    shutil.copytree(ROOT / "conf", path / "conf")
    (path / "stark").mkdir()
    for name in ("dvc.yaml", "deps.yaml", "code.yaml"):  # the pipeline, its generated deps and code fingerprints
        shutil.copy(ROOT / "stark" / name, path / "stark" / name)
    numbers = Path("src/ark/report/paper_numbers.csv")  # the tables stage's data dependency: the paper's numbers
    (path / numbers).parent.mkdir(parents=True)
    shutil.copy(ROOT / numbers, path / numbers)
    dvc(path, "init", "--no-scm", "-q")
    return path


@pytest.fixture(scope="module")
def stark_run(tmp_path_factory):
    """`dvc repro` of every STaRK stage but tables; yields (project, fixture, endpoint)."""
    project = new_project(tmp_path_factory.mktemp("stark_project"))
    fixture = write_stark_tiny(project / "data" / "raw" / "stark")
    endpoint = ScriptedEndpoint()
    with endpoint.serve() as server:
        params = {
            "datasets": {skb: {"dataset": f"stark_{skb}"} for skb in SKBS},
            "baseline": {skb: {"dataset": f"stark_{skb}", "split": "test"} for skb in SKBS},
            "evaluate": {skb: {"dataset": f"stark_{skb}", "backbone": "gpt-4.1", "split": "test",
                               "args": f"backbone.api_base={server.url} eval.progress=false"} for skb in SKBS},
            "spending": {"max_cost_usd": 1, "max_total_cost_usd": 5, "ledger": "cache/spend-stark.sqlite"},
        }
        (project / "stark" / "params.yaml").write_text(yaml.safe_dump(params))
        # the download stage would check the question files against STaRK's pins (the installed conf/), which the
        # tiny release cannot match: its files are committed as placed by hand (tests/test_stark_download.py tests
        # that stage)
        dvc(project, "commit", "-f", *(f"stark/dvc.yaml:download@{skb}" for skb in SKBS))
        dvc(project, "repro", "stark/dvc.yaml:baseline", "stark/dvc.yaml:evaluate")
        yield project, fixture, endpoint


@pytest.mark.e2e
def test_baseline_and_evaluate_publish_metrics_for_every_dataset(stark_run):
    project, fixture, endpoint = stark_run
    for skb in SKBS:
        n_test = len(fixture[skb]["splits"]["test"])
        for stage in ("baseline", "evaluate"):
            metrics = json.loads((project / "results" / "stark" / stage / skb / "metrics.json").read_text())
            assert metrics["n_queries"] == n_test, (stage, skb, metrics)
            assert metrics["n_incomplete"] == 0 and 0 <= metrics["hit@1"] <= 1
            runs = list((project / "results" / "runs" / "stark" / stage / skb).glob("*/records.jsonl"))
            assert len(runs) == 1 and len(runs[0].read_text().splitlines()) == n_test
        config = yaml.safe_load((project / "results" / "stark" / "evaluate" / skb / "config.yaml").read_text())
        assert config["backbone"]["name"] == "gpt-4.1" and config["split"] == "test"
        assert (config["agent"]["T_max"], config["agent"]["n_agents"]) == (20, 3)  # paper defaults


@pytest.mark.e2e
def test_evaluate_called_the_endpoint_and_counted_tokens_and_cost(stark_run):
    project, fixture, endpoint = stark_run
    n_test = sum(len(fixture[skb]["splits"]["test"]) for skb in SKBS)
    # search_then_answer: two replies per agent, three agents per query
    assert endpoint.calls == 2 * 3 * n_test
    assert {r["model"] for r in endpoint.requests} == {"gpt-4.1"}
    record = json.loads(next((project / "results" / "runs" / "stark" / "evaluate" / "prime").glob(
        "*/records.jsonl")).read_text().splitlines()[0])
    assert len(record["agents"]) == 3
    agent = record["agents"][0]
    assert agent["steps"] == 2 and agent["tokens"] == [[100, 20], [100, 20]]  # what the endpoint reported
    assert agent["cost"] > 0  # gpt-4.1's price from litellm's offline price map
    # the pipeline's spend ledger (params `spending`) summed every call of the three runs
    from ark.llm.spending import Ledger

    spent = sum(a["cost"] for skb in SKBS for line in next((project / "results" / "runs" / "stark" / "evaluate" / skb)
                .glob("*/records.jsonl")).read_text().splitlines() for a in json.loads(line)["agents"])
    assert Ledger(project / "cache" / "spend-stark.sqlite").totals()[0] == pytest.approx(spent)


@pytest.mark.e2e
def test_rerun_is_up_to_date(stark_run):
    project, _, endpoint = stark_run
    calls = endpoint.calls
    out = dvc(project, "status", "stark/dvc.yaml:baseline", "stark/dvc.yaml:evaluate")
    assert "up to date" in out.stdout
    assert endpoint.calls == calls


@pytest.mark.e2e
def test_the_tables_stage_puts_our_stark_runs_beside_the_papers_numbers(stark_run):
    project, _, _ = stark_run
    dvc(project, "repro", "stark/dvc.yaml")
    table = (project / "results" / "stark" / "tables" / "stark_table1.md").read_text()
    rows = {}  # a wide table is split into blocks of columns: a row's cells are on one line of each block
    for line in table.splitlines():
        if line.startswith("| "):
            rows[line.split(" | ")[0].strip("| ")] = rows.get(line.split(" | ")[0].strip("| "), "") + line
    # BM25 and ARK (gpt-4.1, T_max 20, 3 agents) ran on all three graphs: "paper / ours (ours - paper)" everywhere
    for row in ("BM25", "ARK"):
        assert rows[row].count(" / ") == 12 and " / –" not in rows[row], rows[row]
    assert max(len(line) for line in table.splitlines()) <= 200
    assert " / –" in rows["GritLM-7B"]  # a method we did not run
    assert not (project / "results" / "metrics.json").exists()  # the BioKG pipeline's file is left alone
    assert "up to date" in dvc(project, "status", "stark/dvc.yaml").stdout


@pytest.mark.e2e
def test_root_repro_leaves_the_stark_pipeline_alone(tmp_path):
    """A plain `dvc repro` runs the root dvc.yaml only; stark/dvc.yaml (the real one, with its real params) parses
    and `dvc dag` shows it without any STaRK data; a plain `dvc status` lists both pipelines."""
    project = new_project(tmp_path)
    shutil.copy(ROOT / "stark" / "params.yaml", project / "stark" / "params.yaml")
    (project / "dvc.yaml").write_text("stages:\n  root:\n    cmd: echo root > root.txt\n    outs: [root.txt]\n")
    out = dvc(project, "repro")
    assert "Running stage 'root'" in out.stdout and "stark/dvc.yaml" not in out.stdout
    assert "up to date" in dvc(project, "status", "dvc.yaml").stdout
    assert "stark/dvc.yaml:download@prime" in dvc(project, "status").stdout
    dag = dvc(project, "dag", "stark/dvc.yaml").stdout
    for stage in ("download@amazon", "build_graph@mag", "evaluate@prime", "tables"):
        assert f"stark/dvc.yaml:{stage}" in dag
