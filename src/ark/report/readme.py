"""Every number in README.md and docs/*.md comes from a generated file.

``python -m ark.report.readme`` copies each ``<!-- <file>.md -->`` … ``<!-- end -->`` block from the generated
file it names (under ``results/`` or ``benchmarks/results/``; a table's runs list left out). ``--check`` changes
nothing and exits 1 naming the blocks that differ and every measured-looking number written by hand outside a block,
a code fence or an inline code span: a percentage, a figure with a unit of time, size or speed, a decimal or a count written with
thousands separators (a test runs it).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BLOCK = re.compile(r"(<!-- ((?:results|benchmarks/results)/[\w./-]+\.md) -->\n)(.*?)(<!-- end -->)", re.S)
UNIT = r"(?:%|×|x\b|ms\b|s\b|min\b|h\b|[KMGT]i?B\b|tokens/s\b|q/s\b|queries/h(?:our)?\b|hours?\b|minutes?\b|seconds?\b)"
PROSE_NUMBER = re.compile(rf"(?<![\w.@/-])\d[\d,]*(?:\.\d+)?\s?{UNIT}|(?<![\w.@/-])\d+\.\d+(?![\w.])"
                          r"|(?<![\w.@/-])\d{1,3}(?:,\d{3})+(?![\w.])")  # and counts such as 96,059
HIDDEN = re.compile(r"```.*?```|<!-- [^\n]*? -->\n.*?<!-- end -->|`[^`\n]*`", re.S)


def documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def table_text(path: Path) -> str:
    """A generated file's Markdown without a table's runs list (the file keeps it)."""
    return path.read_text().split("\nRuns (")[0].rstrip("\n") + "\n"


def sync(doc: Path = ROOT / "README.md", root: Path = ROOT, check: bool = False) -> list[str]:
    """Blocks whose text differs from their file (rewritten in place unless ``check``)."""
    text = doc.read_text()
    stale = []

    def fill(m: re.Match) -> str:
        source = root / m.group(2)
        if not source.is_file():
            stale.append(f"{m.group(2)} (no such file)")
            return m.group(0)
        new = table_text(source)
        if new != m.group(3):
            stale.append(m.group(2))
        return m.group(1) + new + m.group(4)

    updated = BLOCK.sub(fill, text)
    if not check and updated != text:
        doc.write_text(updated)
    return stale


def prose_numbers(text: str) -> list[tuple[int, str]]:
    """(line number, text) of each hand-written measured-looking number outside blocks, fences and code spans."""
    visible = HIDDEN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)  # keeps line numbers
    return [(visible.count("\n", 0, m.start()) + 1, m.group(0)) for m in PROSE_NUMBER.finditer(visible)]


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    problems = 0
    for doc in documents():
        name = doc.relative_to(ROOT)
        for block in sync(doc, check=check):
            print(f"{name}: block {block} {'differs from the file' if check else 'updated'}")
            problems += check
        for line, number in prose_numbers(doc.read_text()) if check else ():
            print(f"{name}:{line}: a number written by hand: {number!r} (quote it from a generated file)")
            problems += 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
