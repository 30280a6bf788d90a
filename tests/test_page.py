"""A run as a web page (``ark show <run> --html``): rendered in headless Chromium without console errors, the first
query's agents on it, and text from the graph shown as text, never run."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ark import build
from ark.report.page import run_page, script_json
from tests.conftest import compose_cfg
from tests.helpers import tiny_graph
from tests.test_agent import build_index

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium (``make browser`` installs it; CI runs that before the tests), else the test is skipped."""
    found = shutil.which("chromium")
    if found is None:
        pytest.skip("no headless browser: Debian's chromium is not installed (make browser)")
    return found


def render(chromium: str, page: Path, fragment: str = "") -> tuple[str, list[str]]:
    """(the DOM after the page's script ran, the console messages it logged)."""
    done = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri() + fragment],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


@pytest.mark.e2e
def test_the_shipped_example_run_renders_with_its_first_querys_agents(chromium, tmp_path):
    page = tmp_path / "run.html"
    subprocess.run([sys.executable, "-m", "ark.cli", "show", "results/examples/ark-synthetic",
                    f"paths.data={tmp_path}/no-data", "--html", str(page)], cwd=ROOT, check=True, capture_output=True)
    dom, console = render(chromium, page)
    assert console == []
    first = json.loads((ROOT / "results/examples/ark-synthetic/records.jsonl").read_text().splitlines()[0])
    assert f"#0 {first['id']}" in dom
    for agent in first["agents"]:
        assert f"agent {agent['agent']}: {agent['steps']} steps of 20" in dom
    assert "search_in_graph" in dom and "gold unknown" in dom  # no data here: no gold, ids only


@pytest.mark.e2e
def test_a_hostile_node_name_renders_as_text(chromium, tiny_project, tmp_path):
    graph = tiny_graph()
    graph.name[4] = HOSTILE  # Ectopia lentis, the answer to "lens of the eye"
    cfg = compose_cfg(tiny_project + ["retriever.params.stemmer=null", "backbone=rules", "agent.n_agents=2"])
    graph.save(cfg.dataset.graph_dir)
    build_index(cfg)
    from ark.runs.execute import execute

    result = execute(build.spec(cfg), "evaluate")
    page = run_page(result["run_dir"], tmp_path / "run.html", tiny_project + ["retriever.params.stemmer=null"])
    text = page.read_text()
    assert HOSTILE not in text and text.count("<script") == 2  # the data and the renderer; the name is escaped
    dom, console = render(chromium, page, "#q1")  # q2, "lens of the eye": its gold and answer are node 4
    assert console == []
    assert len(re.findall(r"<script\b", dom)) == 2 and "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "agent 0:" in dom and "agent 1:" in dom and "fused ranking" in dom


def test_page_data_cannot_close_its_script_element():
    text = script_json({"name": "</script><script>alert(1)</script>", "amp": "&lt;"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": "</script><script>alert(1)</script>", "amp": "&lt;"}


@pytest.mark.parametrize("target", ["/dev/null", "fifo", "long", "/proc/ark.html"])
def test_html_writes_only_a_regular_file_and_says_why_not_in_one_line(target, tmp_path, capsys, monkeypatch):
    import os
    import stat

    from ark.cli import main

    monkeypatch.chdir(ROOT)
    path = {"fifo": tmp_path / "fifo", "long": tmp_path / ("a" * 300 + ".html")}.get(target, Path(target))
    if target == "fifo":
        os.mkfifo(path)
    code = main(["show", "results/examples/ark-synthetic", f"paths.data={tmp_path}/no-data", "--html", str(path)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: --html {path}"), lines
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # still the device, not a page
    if target == "fifo":
        assert stat.S_ISFIFO(os.stat(path).st_mode)


def test_html_pages_hold_at_least_one_query(capsys):
    from ark.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["show", "results/examples/ark-synthetic", "--html", "/tmp/x.html", "--max-queries", "-1"])
    assert exit_.value.code == 2 and "must be at least 1" in capsys.readouterr().err
