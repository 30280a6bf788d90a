"""The reproduction check (ark.report.check, `make check`): every cell this clone regenerated against its expected
value; no OK for shipped numbers; one error line for a malformed file."""
import json

import pytest

from ark.report import check

NUMBERS = {"table1": {"BM25": {"synthetic Hit@1": 11.16, "synthetic Hit@1 lo": 9.0, "synthetic Hit@1 hi": 13.4},
                      "dense": {"synthetic Hit@1": 6.53, "synthetic Hit@1 lo": 5.0, "synthetic Hit@1 hi": 8.1}},
           "table6": {"synthetic": {"test": 1200}}}


def verdict(out: str) -> str:
    """make check's last verdict line (its prose is wrapped to the terminal, so not always the last line)."""
    return [line for line in out.splitlines() if line.startswith(("OK: ", "FAIL: ", "NOT CHECKED: "))][-1]


def test_exact_cells_must_match_and_cpu_dependent_ones_stay_within_their_interval():
    expected = check.expected_numbers(NUMBERS, {"table1": ["dense"]})
    assert expected["table1"]["BM25"]["synthetic Hit@1"] == [11.16, 0.0]
    assert expected["table1"]["dense"]["synthetic Hit@1"] == [6.53, 1.55]  # half the interval's width
    counts, named = check.compare(NUMBERS, expected)
    assert counts == {"table1": (6, 0, 0, 0), "table6": (1, 0, 0, 0)} and named == []
    moved = json.loads(json.dumps(NUMBERS))
    moved["table1"]["dense"]["synthetic Hit@1"] = 7.9  # another CPU's float32: inside the interval
    moved["table1"]["BM25"]["synthetic Hit@1"] = 11.17  # a deterministic cell may not move at all
    del moved["table6"]["synthetic"]["test"]
    counts, named = check.compare(moved, expected)
    assert counts == {"table1": (4, 1, 1, 0), "table6": (0, 0, 1, 0)}
    assert named == ["outside: table1 / BM25 / synthetic Hit@1: expected 11.16 ± 0.0, got 11.17",
                     "outside: table6 / synthetic / test: expected 1200, missing"]


def test_cells_without_an_expected_value_are_listed_not_passed():
    expected = check.expected_numbers({"table1": NUMBERS["table1"]}, {})
    del expected["table1"]["dense"]["synthetic Hit@1 hi"]
    counts, named = check.compare(NUMBERS, expected)
    assert counts == {"table1": (5, 0, 0, 1), "table6": (0, 0, 0, 1)}
    assert named == ["not in expected.json: table1 / dense / synthetic Hit@1 hi",
                     "not in expected.json: table6 / synthetic / test"]


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The committed numbers and expected file, copied where the check reads them."""
    numbers, expected = tmp_path / "numbers.json", tmp_path / "expected.json"
    numbers.write_text(check.NUMBERS.read_text())
    expected.write_text(check.EXPECTED.read_text())
    monkeypatch.setattr(check, "NUMBERS", numbers)
    monkeypatch.setattr(check, "EXPECTED", expected)
    monkeypatch.setattr(check, "RUNS", tmp_path / "runs.json")
    monkeypatch.setattr(check, "ROOT", tmp_path)
    return numbers, expected


def test_shipped_numbers_are_never_called_ok(files, monkeypatch, capsys):
    """A clone that regenerated nothing, or only the quick start's stage: the committed numbers are not checked."""
    monkeypatch.setattr(check, "freshness", lambda root=None: check.Freshness("2 of its inputs differ"))
    assert check.main([]) == 1
    out = capsys.readouterr().out
    assert "NOT CHECKED: 0 of " in out and "OK" not in out.replace("NOT CHECKED", "")
    assert "not regenerated" in out and "make repro" in out


def test_regenerated_numbers_pass_and_a_perturbed_one_fails(files, monkeypatch, capsys):
    numbers, _ = files
    monkeypatch.setattr(check, "freshness", lambda root=None: check.Freshness())  # after a full make repro
    assert check.main([]) == 0
    assert verdict(capsys.readouterr().out).startswith("OK: all ")
    data = json.loads(numbers.read_text())
    table, rows = next(iter(data.items()))
    row, cells = next(iter(rows.items()))
    column = next(iter(cells))
    cells[column] += 1
    numbers.write_text(json.dumps(data))
    assert check.main([]) == 1
    out = capsys.readouterr().out
    assert f"outside: {table} / {row} / {column}" in " ".join(out.split()) and "FAIL: 1 of " in out


def test_an_expected_file_naming_fewer_tables_is_not_ok(files, monkeypatch, capsys):
    _, expected = files
    data = json.loads(expected.read_text())
    dropped = next(iter(data))
    del data[dropped]
    expected.write_text(json.dumps(data))
    monkeypatch.setattr(check, "freshness", lambda root=None: check.Freshness())
    assert check.main([]) == 1
    out = capsys.readouterr().out
    assert f"not in expected.json: {dropped} / " in " ".join(out.split()) and verdict(out).startswith("NOT CHECKED: ")
    expected.write_text("{}")  # names no table at all: nothing passes
    assert check.main([]) == 1 and verdict(capsys.readouterr().out).startswith("NOT CHECKED: ")


@pytest.mark.parametrize("which, text, message", [
    ("expected", '{"table1": {"BM25": {"a": [1.0, 0.0]}', "not valid JSON"),  # truncated
    ("expected", "[1, 2, 3]", "expected an object of tables, got list"),
    ("expected", '"a string"', "expected an object of tables, got str"),
    ("expected", '{"table1": {"BM25": {"a": "1.0"}}}', "expected [value, tolerance]"),
    ("expected", '{"table1": {"BM25": {"a": [1.0]}}}', "expected [value, tolerance]"),
    ("expected", '{"table1": {"BM25": {"a": [1.0, Infinity]}}}', "is not a finite number >= 0"),
    ("expected", '{"table1": {"BM25": {"a": [1.0, -0.5]}}}', "is not a finite number >= 0"),
    ("expected", '{"table1": {"BM25": {"a": [NaN, 0.0]}}}', "with a finite value"),
    ("expected", '{"table1": ["BM25"]}', "is not an object of rows"),
    ("expected", "[" * 100_000 + "]" * 100_000, "nested deeper"),
    ("numbers", '{"table1": {"BM25": {"a": "11.2"}}}', "is not a finite number"),
    ("numbers", '{"table1": {"BM25": [1, 2]}}', "is not an object of cells"),
    ("numbers", b"\xff\xfe\x00garbage", "not UTF-8"),
])
def test_a_malformed_file_is_one_error_line_and_exit_2(files, capsys, which, text, message):
    numbers, expected = files
    path = expected if which == "expected" else numbers
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert check.main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and message in err, err


RUNS = {"table1": {"BM25": ["results/runs/baseline/synthetic-bm25/run-1"],
                   "dense": ["results/runs/baseline/synthetic-bm25/run-1", "results/runs/evaluate/dense/run-2"]}}


def test_a_row_counts_as_regenerated_only_where_every_run_behind_it_is_current():
    fresh = check.Freshness(stale=["evaluate@dense"], outputs=["results/runs/evaluate/dense"])
    assert check.regenerated_rows(NUMBERS, RUNS, fresh) == {"table1": {"BM25"}, "table6": set()}  # no runs: any stale
    assert check.regenerated_rows(NUMBERS, RUNS, check.Freshness()) == {"table1": {"BM25", "dense"},
                                                                         "table6": {"synthetic"}}
    # an output that only shares a prefix with a run's directory does not cover it
    near = check.Freshness(stale=["baseline@x"], outputs=["results/runs/baseline/synthetic-bm2"])
    assert check.regenerated_rows(NUMBERS, RUNS, near)["table1"] == {"BM25", "dense"}
    assert check.regenerated_rows(NUMBERS, RUNS, check.Freshness("its inputs differ")) == {"table1": set(),
                                                                                         "table6": set()}


def test_rows_from_stale_stages_are_named_not_checked_and_the_rest_still_judged(tmp_path, monkeypatch, capsys):
    numbers, expected = tmp_path / "numbers.json", tmp_path / "expected.json"
    numbers.write_text(json.dumps(NUMBERS))
    expected.write_text(json.dumps(check.expected_numbers(NUMBERS, {})))
    (tmp_path / "runs.json").write_text(json.dumps({**RUNS, "table6": {"synthetic": ["results/runs/queries/x"]}}))
    for name, path in (("NUMBERS", numbers), ("EXPECTED", expected), ("RUNS", tmp_path / "runs.json"),
                       ("ROOT", tmp_path)):
        monkeypatch.setattr(check, name, path)
    stale = check.Freshness(stale=["evaluate@dense"], outputs=["results/runs/evaluate/dense"])
    monkeypatch.setattr(check, "freshness", lambda root=None: stale)
    moved = json.loads(json.dumps(NUMBERS))
    moved["table1"]["dense"]["synthetic Hit@1"] = 99.0  # in the stale row: not judged
    numbers.write_text(json.dumps(moved))
    assert check.main([]) == 1
    out = capsys.readouterr().out
    assert "partly regenerated" in out and "FAIL" not in out
    assert "NOT CHECKED: 3 of 7 cells not counted as regenerated" in " ".join(out.split()) and "evaluate@dense" in out
    moved["table1"]["BM25"]["synthetic Hit@1"] = 99.0  # in a current row: a failure
    numbers.write_text(json.dumps(moved))
    assert check.main([]) == 1
    assert verdict(capsys.readouterr().out) == "FAIL: 1 of 4 regenerated cells outside their tolerance"
    monkeypatch.setattr(check, "freshness", lambda root=None: check.Freshness())
    numbers.write_text(json.dumps(NUMBERS))
    assert check.main([]) == 0


def test_dvc_names_a_stale_stage_and_everything_after_it(tmp_path, monkeypatch):
    """A real DVC pipeline: make -> evaluate@a, evaluate@b -> report. A changed parameter stales its stage alone; a
    changed first stage stales what comes after it too, though DVC lists only the first."""
    import subprocess

    from ark.status import dvc_executable

    (tmp_path / "dvc.yaml").write_text("""stages:
  make:
    cmd: echo 1 > data.txt
    outs: [data.txt]
  evaluate:
    foreach: [a, b]
    do:
      cmd: mkdir -p runs/${item} && cat data.txt params.yaml > runs/${item}/m.txt
      deps: [data.txt]
      params: ["${item}"]
      outs: ["runs/${item}"]
  report:
    cmd: cat runs/a/m.txt runs/b/m.txt > numbers.txt
    deps: [runs/a, runs/b]
    outs: [numbers.txt]
""")
    (tmp_path / "params.yaml").write_text("a: 1\nb: 1\n")
    monkeypatch.chdir(tmp_path)
    for args in (["init", "--no-scm", "-q"], ["repro", "-q"]):
        subprocess.run([dvc_executable(), *args], check=True, capture_output=True)
    assert check.freshness(tmp_path) == check.Freshness()
    (tmp_path / "params.yaml").write_text("a: 2\nb: 1\n")
    assert check.freshness(tmp_path) == check.Freshness(None, ["evaluate@a"], ["runs/a"])
    (tmp_path / "dvc.yaml").write_text((tmp_path / "dvc.yaml").read_text().replace("echo 1", "echo 2"))
    fresh = check.freshness(tmp_path)
    assert fresh.report is None and fresh.stale == ["evaluate@a", "make"]
    assert fresh.outputs == ["data.txt", "runs/a", "runs/b"]
