"""The reproduction check (ark.report.check, `make check`): every table cell against its expected value."""
import json

from ark.report import check

NUMBERS = {"table1": {"BM25": {"synthetic Hit@1": 11.16, "synthetic Hit@1 lo": 9.0, "synthetic Hit@1 hi": 13.4},
                      "dense": {"synthetic Hit@1": 6.53, "synthetic Hit@1 lo": 5.0, "synthetic Hit@1 hi": 8.1}},
           "table6": {"synthetic": {"test": 1200}}}


def test_exact_cells_must_match_and_cpu_dependent_ones_stay_within_their_interval():
    expected = check.expected_numbers(NUMBERS, {"table1": ["dense"]})
    assert expected["table1"]["BM25"]["synthetic Hit@1"] == [11.16, 0.0]
    assert expected["table1"]["dense"]["synthetic Hit@1"] == [6.53, 1.55]  # half the interval's width
    counts, outside = check.compare(NUMBERS, expected)
    assert counts == {"table1": (6, 0, 0), "table6": (1, 0, 0)} and outside == []
    moved = json.loads(json.dumps(NUMBERS))
    moved["table1"]["dense"]["synthetic Hit@1"] = 7.9  # another CPU's float32: inside the interval
    moved["table1"]["BM25"]["synthetic Hit@1"] = 11.17  # a deterministic cell may not move at all
    del moved["table6"]["synthetic"]["test"]
    counts, outside = check.compare(moved, expected)
    assert counts == {"table1": (4, 1, 1), "table6": (0, 0, 1)}
    assert outside == ["table1 / BM25 / synthetic Hit@1: expected 11.16 ± 0.0, got 11.17",
                       "table6 / synthetic / test: expected 1200, missing"]


def test_the_command_passes_on_the_committed_results_and_fails_on_a_perturbed_number(tmp_path, monkeypatch, capsys):
    numbers = json.loads(check.NUMBERS.read_text())
    assert check.main([]) == 0, capsys.readouterr().out
    table, rows = next(iter(numbers.items()))
    row, cells = next(iter(rows.items()))
    column = next(iter(cells))
    cells[column] += 1
    perturbed = tmp_path / "numbers.json"
    perturbed.write_text(json.dumps(numbers))
    monkeypatch.setattr(check, "NUMBERS", perturbed)
    assert check.main([]) == 1
    out = capsys.readouterr().out
    assert f"outside: {table} / {row} / {column}" in out and "FAIL" in out
