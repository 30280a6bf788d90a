"""The on-disk LLM response cache (``llm.cache``): request key -> the client's result, one SQLite file.

Keys and values are made by ``ark.llm.client``, which scrubs every reply of the keys a run knows before it stores
it. Processes of one machine share a file. Workers on several machines do not (SQLite's locks do not hold on a
network file system): each writes its own, merged afterwards (``ark.llm.cache_merge``), and may read a merged one
as its ``base``. No litellm import here, so the merge starts at once.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from ark.errors import UserError
from ark.io import blocking_file, loads

BUSY_TIMEOUT = 120.0  # seconds a write waits for another process's write to the same cache file
log = logging.getLogger(__name__)


class ResponseCache:
    """A SQLite table request-hash -> response JSON; safe to share between threads of one process and between
    processes of one machine (WAL; a writer waits up to ``BUSY_TIMEOUT`` for another). ``base``: a merged cache read
    after this one, never written, opened immutable (no locks, so machines can read it at once; nobody may write
    it meanwhile)."""

    def __init__(self, path: str | Path, base: str | Path | None = None):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT, check_same_thread=False, isolation_level=None)
        deadline = time.monotonic() + BUSY_TIMEOUT
        while True:  # switching to WAL does not wait for a process doing the same: "database is locked" at once
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self.path, self.full = Path(path), False
        self._base = None
        if base is not None and Path(base).resolve() != Path(path).resolve():
            if Path(base).exists():
                self._base = sqlite3.connect(Path(base).resolve().as_uri() + "?immutable=1", uri=True,
                                             check_same_thread=False)
                try:
                    self._base.execute("SELECT key, value FROM responses LIMIT 1").fetchall()
                except sqlite3.DatabaseError as e:
                    raise UserError(f"llm.cache_base {base}: not an LLM response cache ({e})") from None
            else:  # the first sweep, before any merge
                log.warning("LLM cache base %s does not exist: nothing to replay from it", base)
        self._lock = threading.Lock()

    def get(self, key: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
            if row is None and self._base is not None:
                row = self._base.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        return loads(row[0], f"the LLM cache {self.path}, key {key[:12]}") if row else None

    def put(self, key: str, value: dict) -> None:
        """Store a reply. A cache that cannot be written any more (its disk or database full) degrades to no cache
        for the rest of the run, with one warning: the run's records, which hold the replies, are what matters."""
        if self.full:
            return
        with self._lock:
            try:
                self._db.execute("INSERT OR REPLACE INTO responses VALUES (?, ?)", (key, json.dumps(value)))
            except sqlite3.OperationalError as e:
                if "full" not in str(e) and "disk" not in str(e):
                    raise
                self.full = True
                log.warning("LLM cache %s cannot be written (%s): the run goes on without storing replies", self.path,
                            e)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def add_missing(self, rows: Iterable[tuple[str, str]]) -> int:
        """Store the (key, value JSON) rows whose key is not here yet, in one transaction; how many were new."""
        with self._lock:
            before = self._db.total_changes
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR IGNORE INTO responses VALUES (?, ?)", rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return self._db.total_changes - before

    def close(self) -> None:
        """Move everything into the main file (the -wal emptied, so the file can be read immutable) and close."""
        with self._lock:
            try:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.OperationalError:  # a full disk: the -wal keeps what it holds, readable as it is
                pass
            self._db.close()


def check_cache_file(path: str | Path) -> None:
    """A UserError unless ``path`` can be the response cache: absent (it will be made) or an SQLite file holding
    one (checked read-only, before a run writes anything)."""
    path = Path(path)
    if not path.exists():
        blocked = blocking_file(path.parent)
        if blocked is not None:
            raise UserError(f"llm.cache {path}: cannot be made there ({blocked} is a file, not a directory); point "
                            "llm.cache elsewhere or set it to null")
        return
    if not path.is_file():
        raise UserError(f"llm.cache {path}: not a file (a directory?); point llm.cache at a file or set it to null")
    try:
        db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            db.execute("SELECT key, value FROM responses LIMIT 1").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        if path.stat().st_size == 0:
            return  # an empty file becomes a cache
        raise UserError(f"llm.cache {path}: not an LLM response cache ({e}); move it away or set llm.cache") from None


def cache_rows(path: str | Path) -> Iterator[tuple[str, str]]:
    """Every (key, value JSON) row of the cache file at ``path``, read-only; sqlite3.DatabaseError if it is not one."""
    db = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    try:
        yield from db.execute("SELECT key, value FROM responses")
    finally:
        db.close()
