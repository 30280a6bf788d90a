"""A spending cap on model calls (``eval.max_cost_usd`` per run, ``eval.max_total_cost_usd`` over every run that
shares ``eval.spend_ledger``, e.g. all stages of the STaRK pipeline).

Each call's cost (litellm's cost accounting, ``LLMResult.cost``) is added to a ledger, an SQLite file that worker
processes share: the run's ``<run dir>/spend.sqlite`` and, if set, the shared ledger. Before each call that is not
answered from the cache, ``refusal()`` says why it may not go out: when the spend so far plus the costliest call
seen so far would pass a cap. With several calls in flight at once, the spend can pass a cap by at most one call
each. A refused call is a failed call: its query stays incomplete, and a rerun with a higher cap resumes it.
"""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path


CAP_REACHED = "spending cap reached"


class Ledger:
    def __init__(self, path: str | Path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(path)
        self._db = sqlite3.connect(str(path), timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS spend (run TEXT NOT NULL, cost REAL NOT NULL)")
        self._lock = threading.Lock()

    def add(self, run: str, cost: float) -> None:
        with self._lock:
            self._db.execute("INSERT INTO spend VALUES (?, ?)", (run, float(cost)))

    def totals(self) -> tuple[float, float]:
        """(money spent, the costliest single call)."""
        with self._lock:
            spent, top = self._db.execute("SELECT COALESCE(SUM(cost), 0), COALESCE(MAX(cost), 0) FROM spend").fetchone()
        return float(spent), float(top)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class SpendingCap:
    """The caps a run's calls are held to: ``(ledger, cap in USD, what the cap is called)`` pairs."""

    def __init__(self, run: str, caps: list[tuple[Ledger, float, str]]):
        self.run, self.caps = run, caps
        self.refused = 0

    def refusal(self) -> str | None:
        for ledger, cap, name in self.caps:
            spent, top = ledger.totals()
            if spent + top > cap or spent >= cap:
                self.refused += 1
                return f"{CAP_REACHED}: ${spent:.4f} spent of {name}=${cap:g} (the next call could pass it)"
        return None

    def add(self, cost: float) -> None:
        for ledger, _, _ in self.caps:
            ledger.add(self.run, cost)

    def spent(self) -> list[tuple[str, float, float]]:
        """(cap name, spent, cap) of each cap."""
        return [(name, ledger.totals()[0], cap) for ledger, cap, name in self.caps]

    def close(self) -> None:
        for ledger, _, _ in self.caps:
            ledger.close()
