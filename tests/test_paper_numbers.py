"""The paper's numbers: the committed paper_numbers.csv against the camera-ready text (when the team's copy is
beside the checkout), and the reader of its tab-separated tables on a made-up table."""
import csv
import random
import re
from pathlib import Path

import pytest

from ark.report.paper import PAPER_NUMBERS, PAPER_TABLES
from ark.report.paper_text import read_tables

PAPER = Path(__file__).resolve().parents[2] / "shared" / "paper" / "ark-2601.13969v2.md"


def rows() -> list[dict]:
    with open(PAPER_NUMBERS, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_every_stark_table_has_the_camera_ready_numbers():
    v2 = [r for r in rows() if r["version"] == "v2"]
    tables = {r["table"] for r in v2}
    assert tables == {f"Table {i}" for i in range(1, 11)}
    assert {theirs for theirs, _ in PAPER_TABLES.values()} - tables == {"Figure 3"}  # v1's: v2 has only the image
    assert {r["row"] for r in v2 if r["table"] == "Table 5"} >= {"GPT-5.2", "Qwen3-4B-600", "Qwen3-8B-6000"}
    assert "ARK + GPT-4o" not in {r["row"] for r in v2 if r["table"] == "Table 1"}  # a v1 row
    assert all(r["version"] in ("v1", "v2") for r in rows())


@pytest.mark.skipif(not PAPER.is_file(), reason=f"the team's copy of the paper text is not at {PAPER}")
def test_thirty_random_cells_are_printed_in_the_papers_table():
    """Each sampled cell's value stands in a line of the table above its caption, the line that names its row."""
    text = re.sub(r"</?(b|u|i)>", "", PAPER.read_text(encoding="utf-8")).replace("$", "").replace("T_{\\max}", "T_max")
    lines = text.splitlines()
    sample = random.Random(20260111).sample([r for r in rows() if r["version"] == "v2"], 30)
    for r in sample:
        caption = next(i for i, line in enumerate(lines) if line.startswith(f"{r['table']}: "))
        block = lines[max(0, caption - 20):caption]
        row_label = r["row"].split(" / ")[-1]
        found = [line for line in block if row_label in line.split("\t") and r["value"] in line.split("\t")]
        assert found, (r["table"], r["row"], r["column"], r["value"])


def test_a_table_with_grouped_columns_and_grouped_rows_is_read_cell_by_cell():
    text = "\n".join([
        "Some prose.", "",
        "Split\tSet\tX\t\tY\t", "\t\tHit@1\tR@20\tHit@1\tR@20",
        "Group A\t<i>kind</i>", "\tone\t<b>1.5</b>\t2\t3,000\t4", "All\ttwo\t5\t6\t7\t8\t", "\tthree\t9\t10\t11\t12",
        "", "Table 3: Made up. Second sentence.", ""])
    cells = read_tables(text)
    assert len(cells) == 12 and {c["table"] for c in cells} == {"Table 3"} and cells[0]["caption"] == "Made up"
    got = {(c["row"], c["column"]): c["value"] for c in cells}
    assert got[("one", "X Hit@1")] == "1.5" and got[("one", "Y Hit@1")] == "3,000"
    assert got[("All / two", "X Recall@20")] == "6" and got[("All / three", "Y Recall@20")] == "12"
