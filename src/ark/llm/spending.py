"""A spending cap on model calls (``eval.max_cost_usd`` per run, ``eval.max_total_cost_usd`` over every run that
shares ``eval.spend_ledger``, e.g. all stages of the STaRK pipeline).

A ledger is an SQLite file that worker processes share: the run's ``<run dir>/spend.sqlite`` and, if set, the shared
ledger. Before a call that is not answered from the cache goes out, its worst-case cost (its prompt's tokens at the
input price plus ``max_tokens`` at the output price, ``worst_cost``) is reserved in every ledger, in one transaction
each that first checks the cap. When the reply comes, the reservation is settled at the call's real cost. A call
whose reservation would pass a cap waits while this process's own calls in flight could still settle below their
worst case and make room (``WAIT``); when none is left in flight it is refused. A server may count a prompt's tokens
differently from litellm (another tokenizer, per-message or tool overhead, a proxy's own prompt), so the prompt is
reserved at the largest ratio of the server's count to litellm's seen so far, and a process sends its first call
alone to measure it. So the spend never passes a cap, however many calls are in flight in however many processes,
as long as no reply reports more prompt tokens per counted token than the calls settled before it was reserved, nor
more completion tokens than ``max_tokens``; and the calls of a killed run stay counted at their worst case. A refused call is a
failed call: its query stays incomplete, and a rerun with a higher cap resumes it. A cap on a model whose price is
unknown (``token_prices``) is refused before the run starts.
"""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path


CAP_REACHED = "spending cap reached"
WAIT = "wait"  # SpendingCap.reserve: no room now, but calls of this process in flight may settle and make some
PRICE_KEYS = ("input_cost_per_token", "output_cost_per_token")  # backbone.extra: a price of one's own (USD)


def token_prices(model: str, extra: dict | None = None) -> tuple[float, float] | None:
    """(USD per input token, per output token) of a hosted model: ``backbone.extra``'s prices where both are set,
    else litellm's price map; None where neither knows it (a proxy alias, an Azure deployment, a local server)."""
    extra = extra or {}
    if all(extra.get(k) is not None for k in PRICE_KEYS):
        return float(extra[PRICE_KEYS[0]]), float(extra[PRICE_KEYS[1]])
    import litellm

    try:
        info = litellm.get_model_info(model)
    except Exception:  # litellm raises a bare Exception for a model it does not list
        return None
    prices = info.get(PRICE_KEYS[0]), info.get(PRICE_KEYS[1])
    return (float(prices[0]), float(prices[1])) if None not in prices else None


def unpriced(model: str) -> str:
    return (f"{model!r} has no price in litellm's price map, so a spending cap cannot be held: set "
            "+backbone.extra.input_cost_per_token and +backbone.extra.output_cost_per_token (USD per token), or run "
            "without a cap (eval.max_cost_usd=null and eval.max_total_cost_usd=null)")


class Ledger:
    def __init__(self, path: str | Path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(path)
        self._db = sqlite3.connect(str(path), timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS spend (run TEXT NOT NULL, cost REAL NOT NULL, "
                         "settled INTEGER NOT NULL DEFAULT 1)")
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(spend)")]
        if "settled" not in columns:  # a ledger written before reservations: every row is a settled call
            self._db.execute("ALTER TABLE spend ADD COLUMN settled INTEGER NOT NULL DEFAULT 1")
        self._lock = threading.Lock()

    def add(self, run: str, cost: float) -> None:
        with self._lock:
            self._db.execute("INSERT INTO spend VALUES (?, ?, 1)", (run, float(cost)))

    def reserve(self, run: str, worst: float, cap: float) -> int | None:
        """Reserve ``worst`` for one call unless the spend (reservations included) plus it would pass ``cap``; the
        reservation's row id, or None when refused. One transaction: no other process reserves in between."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                spent = self._db.execute("SELECT COALESCE(SUM(cost), 0) FROM spend").fetchone()[0]
                if spent + worst > cap:
                    self._db.execute("ROLLBACK")
                    return None
                row = self._db.execute("INSERT INTO spend VALUES (?, ?, 0)", (run, float(worst))).lastrowid
                self._db.execute("COMMIT")
                return row
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def settled(self) -> float:
        """The spend of the calls that came back (reservations left out)."""
        with self._lock:
            return float(self._db.execute("SELECT COALESCE(SUM(cost), 0) FROM spend WHERE settled").fetchone()[0])

    def settle(self, row: int, cost: float) -> None:
        """A reservation's call came back: its real cost replaces the worst case."""
        with self._lock:
            self._db.execute("UPDATE spend SET cost = ?, settled = 1 WHERE rowid = ?", (float(cost), row))

    def totals(self) -> tuple[float, float]:
        """(money spent, reservations of calls in flight or killed included; the costliest settled call)."""
        with self._lock:
            spent, top = self._db.execute("SELECT COALESCE(SUM(cost), 0), COALESCE(MAX(CASE WHEN settled THEN cost "
                                          "END), 0) FROM spend").fetchone()
        return float(spent), float(top)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class SpendingCap:
    """The caps a run's calls are held to: ``(ledger, cap in USD, what the cap is called)`` pairs."""

    def __init__(self, run: str, caps: list[tuple[Ledger, float, str]]):
        self.run, self.caps = run, caps
        self.refused = 0
        self.in_flight = 0  # this process's reservations not settled yet
        # the server's prompt tokens per token litellm counts, the most seen so far (at least 1): a server that
        # counts more (another tokenizer, per-message overhead, a proxy's own prompt) is reserved for at its rate
        self.prompt_ratio = 1.0
        self.measured = False  # a reply with its token counts came back: until then one call at a time

    def worst_cost(self, counted: int, max_tokens: int, prices: tuple[float, float]) -> float:
        """The most a call can cost: its prompt (``counted`` tokens by litellm, at the server's rate seen so far)
        at the input price, ``max_tokens`` at the output price."""
        return counted * self.prompt_ratio * prices[0] + max_tokens * prices[1]

    def reserve(self, worst: float) -> list[tuple[Ledger, int]] | str:
        """The reservations of one call of worst-case cost ``worst`` in every ledger; ``WAIT`` when there is no room
        now but this process's calls in flight may make some; else why it may not go out (what it reserved in the
        ledgers before the refusing one is given back)."""
        if self.in_flight and not self.measured:  # the first call alone: it shows how the server counts tokens
            return WAIT
        held = []
        for ledger, cap, name in self.caps:
            row = ledger.reserve(self.run, worst, cap)
            if row is None:
                for other, other_row in held:
                    other.settle(other_row, 0.0)
                if self.in_flight and ledger.settled() + worst <= cap:
                    return WAIT
                self.refused += 1
                spent = ledger.totals()[0]
                return (f"{CAP_REACHED}: ${spent:.4f} spent of {name}=${cap:g} (the next call could cost up to "
                        f"${worst:.4f})")
            held.append((ledger, row))
        self.in_flight += 1
        return held

    def settle(self, held: list[tuple[Ledger, int]], cost: float, counted: int = 0, reported: int = 0) -> None:
        """A call came back at ``cost``; its prompt was ``counted`` tokens by litellm and ``reported`` by the server
        (0: unknown, e.g. a failed call)."""
        for ledger, row in held:
            ledger.settle(row, cost)
        self.in_flight -= 1
        if counted > 0 and reported > 0:
            self.prompt_ratio = max(self.prompt_ratio, reported / counted)
            self.measured = True

    def spent(self) -> list[tuple[str, float, float]]:
        """(cap name, spent, cap) of each cap."""
        return [(name, ledger.totals()[0], cap) for ledger, cap, name in self.caps]

    def close(self) -> None:
        for ledger, _, _ in self.caps:
            ledger.close()
