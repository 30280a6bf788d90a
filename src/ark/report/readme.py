"""The README's results blocks are the report's tables: ``python -m ark.report.readme`` copies each
``<!-- results/tables/<name>.md -->`` … ``<!-- end -->`` block from the file it names (its runs list left out);
``--check`` exits 1 naming the blocks that differ (a test runs it)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BLOCK = re.compile(r"(<!-- (results/tables/[\w.-]+\.md) -->\n)(.*?)(<!-- end -->)", re.S)


def table_text(path: Path) -> str:
    """A table's Markdown without its runs list (the file keeps it)."""
    return path.read_text().split("\nRuns (")[0].rstrip("\n") + "\n"


def sync(readme: Path = ROOT / "README.md", root: Path = ROOT, check: bool = False) -> list[str]:
    """Blocks whose text differs from their table (rewritten in place unless ``check``)."""
    text = readme.read_text()
    stale = []

    def fill(m: re.Match) -> str:
        new = table_text(root / m.group(2))
        if new != m.group(3):
            stale.append(m.group(2))
        return m.group(1) + new + m.group(4)

    updated = BLOCK.sub(fill, text)
    if not check and updated != text:
        readme.write_text(updated)
    return stale


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    stale = sync(check=check)
    for name in stale:
        print(f"README block {name}: {'differs from the file' if check else 'updated'}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
