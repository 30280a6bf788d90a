"""Trajectory records: one JSON line per query (DESIGN §4.4), appended as queries finish.

A run that is killed leaves at most a truncated last line; ``RecordStore`` drops it on open, skips
the queries already complete, and ``finalize`` rewrites the file once in query order with the last
record of each query, so a rerun never duplicates or loses a query.
"""
from __future__ import annotations

import json
from pathlib import Path

from ark.io import write_jsonl


class RecordStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, dict] = {}
        if self.path.exists():
            self._load()
        self._file = open(self.path, "a", encoding="utf-8")

    def _load(self) -> None:
        good = 0
        with open(self.path, "rb") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    break  # a line cut by a kill: everything after it is dropped
                self.records[rec["id"]] = rec
                good += len(line)
        if good < self.path.stat().st_size:
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def done(self, query_id: str) -> bool:
        rec = self.records.get(query_id)
        return rec is not None and rec.get("complete", False)

    def add(self, record: dict) -> None:
        self.records[record["id"]] = record
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()

    def finalize(self, order: list[str]) -> list[dict]:
        """Rewrite the file atomically: one line per query, in ``order``."""
        self._file.close()
        rows = [self.records[i] for i in order if i in self.records]
        write_jsonl(self.path, rows)
        return rows

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
