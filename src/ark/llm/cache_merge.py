"""Merge LLM response caches written by separate workers into one:
``python -m ark.llm.cache_merge cache/llm.sqlite cache/llm-*.sqlite``.

Workers on several machines each write their own SQLite file (``llm.cache``), since one file on a network file
system is not safe to write from several machines. Merging copies every row whose request key the target lacks,
byte for byte: keys and values are the client's own (``ark.llm.client``), replies already scrubbed of keys
(``ark.secrets``) before any worker cached them. A key already in the target keeps its reply there (the target
first, then the sources in the order given): two workers that asked the same request may have got different
replies, and one cache replays one of them. Merging again adds nothing. The target is left checkpointed, so the
next sweep's workers can read it as ``llm.cache_base``.
"""
from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from ark.errors import UserError
from ark.llm.cache import ResponseCache, cache_rows


def merge(target: str | Path, sources: list[str | Path]) -> dict:
    """Copy the rows of ``sources`` missing from ``target`` into it: {"files", "rows", "added"}."""
    paths = [Path(s) for s in sources if Path(s).resolve() != Path(target).resolve()]
    rows = 0
    for path in paths:  # every source read through before anything is written
        if not path.is_file():
            raise UserError(f"{path}: no such LLM cache file")
        try:
            rows += sum(1 for _ in cache_rows(path))
        except sqlite3.DatabaseError as e:
            raise UserError(f"{path}: not an LLM response cache ({e})") from None
    cache = ResponseCache(target)
    added = sum(cache.add_missing(cache_rows(path)) for path in paths)
    cache.close()
    return {"files": len(paths), "rows": rows, "added": added}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target", help="the merged cache (created if missing), e.g. cache/llm.sqlite")
    parser.add_argument("sources", nargs="+", help="worker caches, e.g. cache/llm-*.sqlite (the target is skipped)")
    args = parser.parse_args(argv)
    try:
        out = merge(args.target, args.sources)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"merged {out['files']} file(s) into {args.target}: {out['added']} responses added, "
          f"{out['rows'] - out['added']} already there (kept as they were)")


if __name__ == "__main__":
    main()
