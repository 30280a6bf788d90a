"""``ark status``: dvc status's stale stages grouped by their most upstream cause, and its exit codes."""
import json
import sys

from ark.cli import main
from ark.status import classify, exit_code, text

STAGES = ["download@biokg", "download@phenopackets", "build_graph@biokg", "build_index@biokg-bm25",
          "baseline@synthetic-bm25", "evaluate@rules-synthetic", "evaluate@ark-synthetic", "legacy", "collect",
          "table_download@example", "report", "make_queries@synthetic"]
STATUS = {  # as `dvc status dvc.yaml --json` prints it
    "evaluate@rules-synthetic": [  # code and params: code
        {"changed deps": {"code.yaml": {"evaluate.rules-synthetic": "modified"},
                          "conf/backbone/rules.yaml": {"seed": "modified"}}}],
    "evaluate@ark-synthetic": [{"changed deps": {"code.yaml": "new"}},  # a lock entry without its fingerprint
                               {"changed outs": {"results/runs/evaluate/ark-synthetic": "not in cache"}}],
    "legacy": [{"changed deps": {"src/ark/old.py": "modified"}}],
    "baseline@synthetic-bm25": [  # params and data: params
        {"changed deps": {"data/index/biokg/bm25": "modified", "conf/config.yaml": {"baseline.k": "modified"}}}],
    "build_index@biokg-bm25": [{"changed deps": {"conf/retriever/bm25.yaml": "new"}}],
    "build_graph@biokg": [{"changed deps": {"data/raw/biokg": "deleted"}},
                          {"changed outs": {"data/graph/biokg": "not in cache"}}],
    "download@phenopackets": ["always changed"],
    "table_download@example": [{"changed outs": {"data/raw/tables/example": "modified"}}],
    "collect": [{"changed outs": {"results/runs/collect/rules-synthetic": "deleted"}}],
    "report": [{"changed outs": {"results/tables": "not in cache", "results/figures": "deleted"}}],
}


def test_each_stale_stage_is_in_the_group_of_its_most_upstream_cause():
    summary = classify(STATUS, STAGES)
    groups = summary["groups"]
    assert {group: g["stages"] for group, g in groups.items()} == {
        "code": ["evaluate@rules-synthetic", "evaluate@ark-synthetic", "legacy"],
        "params": ["baseline@synthetic-bm25", "build_index@biokg-bm25"],
        "data": ["build_graph@biokg"],
        "other": ["download@phenopackets", "table_download@example"],
        "outputs": ["collect", "report"],
    }
    assert groups["params"]["changed"] == {"conf/config.yaml": 1, "conf/retriever/bm25.yaml": 1}
    assert groups["code"]["changed"] == {"code.yaml": 2, "src/ark/old.py": 1}
    assert (summary["total"], summary["up_to_date"]) == (12, 2)
    assert exit_code(summary) == 1
    assert exit_code(classify({}, STAGES)) == 0


def test_a_foreach_stage_is_named_once_and_a_long_group_is_cut():
    names = [f"evaluate@run{i}" for i in range(30)]
    lines = text(classify({name: [{"changed deps": {"code.yaml": "new"}}] for name in names}, names + ["report"]),
                 "dvc.yaml", 60).splitlines()
    assert lines[:3] == ["dvc.yaml: 30 of 31 stages stale, 1 up to date", "stale on code: 30",
                         "  evaluate@{run0, run1, run2, run3, run4, run5, run6, run7,"]
    assert lines[4:6] == ["    run16, run17, run18, run19, run20, run21, run22, run23},", "    and 6 more"]
    assert max(map(len, lines[:-1])) <= 60
    assert lines[-1] == ("(each stale stage is counted once, under its most upstream cause: code > params/config > "
                         "data > outputs only)")


def fake_dvc(tmp_path, monkeypatch, status_json: str, fail: str = ""):
    """A dvc, alone on PATH (the dvc beside this Python hidden), that lists STAGES and prints ``status_json``, or
    fails with ``fail`` on its standard error."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dvc = bin_dir / "dvc"
    dvc.write_text(f"""#!{sys.executable}
import sys
args = " ".join(sys.argv[1:])
if args == "stage list --name-only dvc.yaml":
    print("\\n".join({STAGES!r}))
elif args == "status dvc.yaml --json" and {fail!r}:
    sys.stderr.write({fail!r})
    sys.exit(255)
elif args == "status dvc.yaml --json":
    print({status_json!r})
else:
    sys.exit("ERROR: unexpected arguments " + args)
""")
    dvc.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("COLUMNS", "80")


def test_ark_status_prints_the_groups_and_exits_1_when_a_stage_is_stale(tmp_path, monkeypatch, capsys):
    fake_dvc(tmp_path, monkeypatch, json.dumps(STATUS))
    assert main(["status"]) == 1
    assert capsys.readouterr().out == """\
dvc.yaml: 10 of 12 stages stale, 2 up to date
stale on code: 3
  changed (stages): src/ark/old.py (1)
  evaluate@{rules-synthetic, ark-synthetic}, legacy
stale on params/config: 2
  changed (stages): conf/config.yaml (1), conf/retriever/bm25.yaml (1)
  baseline@synthetic-bm25, build_index@biokg-bm25
stale on data: 1
  changed (stages): data/raw/biokg (1)
  build_graph@biokg
stale otherwise (a changed command, an edited output, always_changed): 2
  changed (stages): always changed (1), data/raw/tables/example (1)
  download@phenopackets, table_download@example
only outputs missing: 2
  collect, report
up to date: 2
(each stale stage is counted once, under its most upstream cause: code > params/config > data > other > outputs only)
"""
    assert main(["status", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["groups"]["data"] == {"stages": ["build_graph@biokg"],
                                                                      "changed": {"data/raw/biokg": 1}}


def test_ark_status_exits_0_when_every_stage_is_up_to_date(tmp_path, monkeypatch, capsys):
    fake_dvc(tmp_path, monkeypatch, "{}")
    assert main(["status"]) == 0
    assert capsys.readouterr().out == "dvc.yaml: all 12 stages up to date\n"


def test_ark_status_says_in_one_line_why_dvc_failed_or_is_missing(tmp_path, monkeypatch, capsys):
    fake_dvc(tmp_path, monkeypatch, "", fail="ERROR: '/repo/data/index' is busy, it is being blocked by:\n"
                                             "  (PID 7): dvc repro build_index@biokg-dense\n\n"
                                             "If there are no processes with such PIDs, remove the lock\n")
    assert main(["status"]) == 2
    assert capsys.readouterr() == ("", "error: dvc status dvc.yaml --json: '/repo/data/index' is busy, it is being "
                                       "blocked by: (PID 7): dvc repro build_index@biokg-dense\n")
    (tmp_path / "bin" / "dvc").unlink()
    assert main(["status"]) == 2
    assert capsys.readouterr().err == "error: dvc not found beside this Python or on PATH (make install installs it)\n"
