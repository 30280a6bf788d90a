"""A run directory and its files (DESIGN §4.4, §4.6).

``<run dir>/config.yaml``      the run's identity (its result-affecting settings), written when it starts
``<run dir>/records.jsonl``    one ``QueryRecord`` per query, appended as queries finish (no gold in it)
``<run dir>/scores.jsonl``     per-query scores against gold (not in a label-free ``collect`` run)
``<run dir>/metrics.json``     scalar metrics only (what ``dvc metrics show`` reads; not in a ``collect`` run)
``<run dir>/stats.json``       tool use, steps, invalid calls, tokens, cost (deterministic under replay)
``<run dir>/provenance.json``  package versions and sha256 of the data read
``<run dir>/timings.jsonl``    per query: its wall-clock time, per agent and step the model and tool time and
                               whether the step was replayed from the LLM cache; outside the directory's DVC hash
                               (``.dvcignore``), so a rerun with the same result leaves ``dvc.lock`` as it was
``<run dir>/machine.json``     the platform and processor it ran on: whose times ``timings.jsonl`` holds
Their summary and the platform go to ``<paths.logs>/runs/<run dir name>.json`` (and ``timing.json`` in the publish
dir, which git ignores) and W&B: query wall-clock p50/p95/mean, per-agent model and tool time.
With ``run.publish`` set (the DVC stages), metrics, stats, config and provenance are also copied there: a
path DVC knows in advance, committed to git.

A run that is killed leaves at most an incomplete last line (no newline) in ``records.jsonl``; ``RecordStore``
drops that line alone on open (saying so), refuses a file whose complete lines are not all records, skips the
queries already complete, and ``finalize`` rewrites the file once in query order. One process at a time:
``Run.open`` takes an OS lock on ``<run dir>/.lock`` (holding the pid), released and removed by ``finish``.
"""
from __future__ import annotations

import atexit
import fcntl
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import yaml

from ark.errors import UserError
from ark.agent.records import QueryRecord, join_timings, split_timings
from ark.io import blocking_file, hash_paths, loads, package_versions, write_json, write_jsonl, write_text_atomic
from ark.machine import cpu_name
from ark.runs.identity import data_inputs, identity, run_name, run_tags

PUBLISHED = ("metrics.json", "stats.json", "config.yaml", "provenance.json")


TIMINGS = "timings.jsonl"  # beside records.jsonl; left out of the run directory's DVC hash (.dvcignore)


class RecordStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.timings_path = self.path.with_name(TIMINGS)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, QueryRecord] = {}
        if self.path.exists():
            self._load()
        if self.timings_path.exists():
            _drop_incomplete_line(self.timings_path)
        self._file = open(self.path, "a", encoding="utf-8")
        self._timings = open(self.timings_path, "a", encoding="utf-8")

    def _load(self) -> None:
        """Resume: every complete line must be a record; an incomplete last line (no newline: a kill cut it) is
        dropped, and only that line. A query recorded twice (a copy appended by hand) keeps its last record, with a
        warning."""
        records, cut = read_records(self.path, allow_cut=True)
        self.records = {r.id: r for r in records}
        if len(self.records) < len(records):
            print(f"warning: {self.path}: {len(records) - len(self.records)} query record(s) appear twice; the last "
                  "of each is kept", file=sys.stderr)
        if cut:
            with open(self.path, "r+b") as f:
                f.truncate(self.path.stat().st_size - cut)
            print(f"{self.path}: dropped its incomplete last line ({cut} bytes, left by an interrupted run); "
                  "that query runs again", file=sys.stderr)

    def check(self, queries: list[dict]) -> None:
        """Every record kept for resuming belongs to one of ``queries`` and holds its very text: a record of another
        query set, or of a question since rewritten, is an error, never reused or dropped unsaid."""
        texts = {q["id"]: q["query"] for q in queries}
        for rid, record in self.records.items():
            if rid not in texts:
                raise UserError(f"{self.path} holds a record of query {rid!r}, which is not among this run's "
                                "queries; move the run directory away and rerun")
            if record.query != texts[rid]:
                raise UserError(f"{self.path}: the record of query {rid!r} was made for another question text than "
                                "the query file now holds; move the run directory away and rerun")

    def done(self, query_id: str) -> bool:
        rec = self.records.get(query_id)
        return rec is not None and rec.complete

    def add(self, record: QueryRecord) -> None:
        self.records[record.id] = record
        body, timings = split_timings(record.to_dict())
        self._file.write(json.dumps(body, ensure_ascii=False) + "\n")
        self._file.flush()
        self._timings.write(json.dumps(timings) + "\n")
        self._timings.flush()

    def finalize(self, order: list[str]) -> list[QueryRecord]:
        """Rewrite the files atomically: one line per query, in ``order``."""
        self.close()
        rows = [self.records[i] for i in order if i in self.records]
        split = [split_timings(r.to_dict()) for r in rows]
        write_jsonl(self.timings_path, (t for _, t in split))
        write_jsonl(self.path, (body for body, _ in split))
        return rows

    def close(self) -> None:
        for f in (self._file, getattr(self, "_timings", None)):
            if f is not None and not f.closed:
                f.close()


def _drop_incomplete_line(path: Path) -> None:
    """Cut a last line without its newline (a kill's), so that the next append starts a line of its own."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)


def read_timings(path: Path) -> dict[str, dict]:
    """{query id: its timings} from ``timings.jsonl``; what cannot be read is left out (times are not results)."""
    found = {}
    if not path.is_file():
        return found
    with open(path, "rb") as f:
        for line in f:
            try:
                row = json.loads(line)
                found[row["id"]] = row
            except (ValueError, TypeError, KeyError, RecursionError):
                continue
    return found


class Run:
    """``Run(spec, stage)``: the directory of the run that ``spec`` (``ark.build.RunSpec``) identifies, and what goes
    into it."""

    def __init__(self, spec, stage: str):
        self.stage = stage
        self.identity = identity(spec, stage)
        self.inputs = list(data_inputs(spec, stage).values())
        self.name = run_name(self.identity)
        self.tags = run_tags(self.identity, stage)
        self.dir = Path(spec.run.root) / self.name
        self.publish_dir = Path(spec.run.publish) if spec.run.publish else None
        self.timing_path = Path(spec.paths.logs) / "runs" / f"{self.name}.json"
        self._lock: RunLock | None = None

    def open(self) -> RecordStore:
        """Create or resume the run: its ``config.yaml`` must be this identity. The run stays locked against
        other processes until ``finish`` (or this process ends)."""
        blocked = blocking_file(self.publish_dir) if self.publish_dir is not None else None
        if blocked is not None:  # found now, not after the whole run
            raise UserError(f"run.publish {self.publish_dir}: cannot make the directory there ({blocked} is a file)")
        fresh = not self.dir.exists()
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # an existing file, a symlink loop, a read-only file system, no permission
            raise UserError(f"run.root {self.dir.parent}: cannot make the run directory there "
                            f"({e.strerror or type(e).__name__})") from None
        try:
            self._lock = RunLock.acquire(self.dir)
        except BaseException:
            if fresh:  # a full disk: no directory holding an empty lock is left behind
                shutil.rmtree(self.dir, ignore_errors=True)
            raise
        try:
            config = self.dir / "config.yaml"
            if config.exists() and _read_config(config) != self.identity:
                raise UserError(f"{config} holds another configuration than its directory name says; move the "
                                "directory away and rerun")
            write_text_atomic(config, yaml.safe_dump(self.identity, sort_keys=True, allow_unicode=True))
            return RecordStore(self.dir / "records.jsonl")
        except BaseException:
            self.close()
            if fresh:  # nothing of this run was there before: nothing of it stays
                shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def close(self) -> None:
        """Unlock the run (``finish`` does)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def finish(self, scores: list[dict] | None, metrics: dict | None, stats: dict) -> None:
        """``scores`` and ``metrics`` None: a label-free run (``collect``), which has neither."""
        if metrics is not None:
            write_jsonl(self.dir / "scores.jsonl", scores)
            write_json(self.dir / "metrics.json", metrics)
        write_json(self.dir / "stats.json", stats)
        write_json(self.dir / "provenance.json", {"run": self.name, "versions": package_versions(),
                                                  "data": hash_paths(self.inputs)})
        write_json(self.dir / "machine.json", machine())  # beside the records' times; never published
        if self.publish_dir is not None:
            self.publish_dir.mkdir(parents=True, exist_ok=True)
            for name in PUBLISHED:
                if name != "metrics.json" or metrics is not None:
                    shutil.copyfile(self.dir / name, self.publish_dir / name)
        self.close()

    def write_timing(self, timing: dict) -> None:
        """Wall-clock figures and where they were measured: under ``paths.logs`` and, for a DVC stage, beside
        the published metrics (committed, but not a DVC output: a rerun's new timings change no stage)."""
        record = {"run": self.name, **machine(), **timing}
        write_json(self.timing_path, record)
        if self.publish_dir is not None:
            write_json(self.publish_dir / "timing.json", record)


def machine() -> dict:
    """Where a run was computed: its times (latency, tokens per second) are this machine's."""
    return {"platform": platform.platform(), "processor": cpu_name()}


def load_run(directory: str | Path) -> tuple[dict, list[QueryRecord]]:
    """(identity config, records) of a finished run directory: what analyses read, never the path."""
    directory = Path(directory)
    for name in ("config.yaml", "records.jsonl"):
        if not (directory / name).is_file():
            raise UserError(f"{directory} is not a run directory: no {name}")
    return _read_config(directory / "config.yaml"), read_records(directory / "records.jsonl")[0]


def _read_config(path: Path) -> dict:
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is damaged ({' '.join(str(e).split())[:120]})") from None
    if not isinstance(config, dict):
        raise UserError(f"{path} is damaged: not a mapping")
    return config


def read_records(path: Path, allow_cut: bool = False) -> tuple[list[QueryRecord], int]:
    """(records, bytes of an incomplete last line). A complete line (ending in a newline) that is not a record is
    damage, never dropped: one clear error. An incomplete last line is what a kill leaves; only ``allow_cut``
    (resuming) accepts it, and it is not read."""
    records, cut = [], 0
    if not path.is_file():  # a directory; a FIFO would block
        raise UserError(f"{path} is not a regular file; move it away (the run then starts over)")
    timings = read_timings(path.with_name(TIMINGS))
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.endswith(b"\n"):  # only the last line can lack its newline
                if not allow_cut:
                    raise UserError(f"{path} line {n} is incomplete (an interrupted run); rerun the run to resume it")
                cut = len(line)
                break
            if not line.strip():
                continue
            try:
                row = loads(line.decode("utf-8"), f"{path} line {n}")
                records.append(QueryRecord.from_dict(join_timings(row, timings.get(row.get("id")))))
            except UserError:
                raise
            except (ValueError, TypeError, KeyError, AttributeError) as e:  # bad UTF-8 or JSON, or not a record
                raise UserError(f"{path} line {n} is not a valid record ({type(e).__name__}: "
                                f"{' '.join(str(e).split())[:120]}); repair or remove the file (the run then starts "
                                "over)") from None
    return records, cut


class RunLock:
    """An exclusive OS lock (``flock``) on ``<run dir>/.lock``, held by one process while it has the run open; the
    file holds its pid and is removed on release, so no finished run directory (a DVC output) contains it."""

    held: dict[str, "RunLock"] = {}  # by run directory: this process's locks (re-opening its own run is fine)

    def __init__(self, path: Path, file):
        self.path, self.file = path, file

    @classmethod
    def acquire(cls, directory: Path) -> "RunLock":
        path = directory / ".lock"
        mine = cls.held.get(str(directory.resolve()))
        if mine is not None and mine.current():
            return mine
        while True:
            f = open(path, "a+", encoding="utf-8")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                pid = f.read().strip() or "unknown"
                f.close()
                raise UserError(f"run {directory.name} is open in another process (pid {pid}); wait for it to end "
                                f"or stop it ({path})") from None
            lock = cls(path, f)
            if lock.current():  # not a file its last holder removed between our open and our lock
                break
            f.close()
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        cls.held[str(directory.resolve())] = lock
        atexit.register(lock.release)
        return lock

    def current(self) -> bool:
        try:
            return not self.file.closed and os.stat(self.path).st_ino == os.fstat(self.file.fileno()).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self.file.closed:
            return
        if self.current():
            self.path.unlink()
        self.file.close()
        if self.held.get(key := str(self.path.parent.resolve())) is self:
            del self.held[key]


def read_scores(directory: str | Path) -> dict[str, dict]:
    """Per-query scores of a run directory, ``{query id: {metric: value, complete: bool}}`` in file order; empty for
    a run without scores (a label-free collect run)."""
    path = Path(directory) / "scores.jsonl"
    if not path.exists():
        return {}
    with open(path, encoding="utf-8") as f:
        rows = [loads(line, f"{path} line {n}") for n, line in enumerate(f, 1) if line.strip()]
    return {r.pop("id"): r for r in rows}


def query_rows(run_dir: str | Path) -> tuple[list[str], list[list]]:
    """(columns, one row per query) of a scored run directory: query id and text, each metric of
    ``scores.jsonl``, whether it completed, agent steps and tool calls (summed over its agents), wall time (s)."""
    _, records = load_run(run_dir)
    scores = read_scores(run_dir)
    first = next(iter(scores.values()), {})
    metrics = [k for k in first if k != "complete"]
    columns = ["query_id", "query", *metrics, "complete", "steps", "tool_calls", "wall_time"]
    rows = []
    for r in records:
        s = scores[r.id]
        rows.append([r.id, r.query, *(s[m] for m in metrics), s.get("complete", True),
                     sum(a.steps for a in r.agents), sum(sum(a.tool_calls.values()) for a in r.agents),
                     None if r.wall_time is None else round(r.wall_time, 3)])
    return columns, rows


def open_store(run: Run, queries: list[dict]):
    """``run``'s record store, checked against ``queries`` (a record of another query or question text: closed
    again, and the error raised)."""
    store = run.open()
    try:
        store.check(queries)
    except UserError:
        store.close()
        run.close()
        raise
    return store
