"""Queries spread over worker processes (``eval.workers``), for runs that keep many agents in flight.

One event loop runs every agent's CPU work (litellm, HTTP, tools, bookkeeping) on one core: with ~10 ms a step and
64 agents of 1 s steps that core is most of the way to full, and each agent waits for it. Each worker process builds
the tools and the policy from the same run spec and runs every ``workers``-th query on its own loop; the records come
back to the caller, which stays the run's only writer (resume, the lock and the record order are unchanged), and a
record does not depend on the process that made it (agents seed by query and index). ``eval.concurrency`` stays the
queries in flight in all. The LLM response cache is one SQLite file that the processes share (WAL).
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
import traceback

from ark.agent.records import QueryRecord
from ark.errors import RunFailed


def run_in_workers(spec, queries: list[dict], on_record, agents) -> tuple[int, float]:
    """Run ``queries`` in ``spec.eval.workers`` processes, ``on_record(query, record)`` here as each finishes; (the model calls
    the workers made, the longest time a worker ran its agents: its start-up excluded). ``agents(spec)``: a
    module-level context manager yielding the agents (``ark.runs.execute.agents``), which each worker opens. A
    worker that fails stops the others and raises."""
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that holds threads and sockets
    results = ctx.Queue()
    procs = [ctx.Process(target=_work, args=(agents, spec, shard, concurrency, results, os.getpid()), daemon=True)
             for shard, concurrency in shards(queries, spec.eval.workers, spec.eval.concurrency)]
    by_id = {q["id"]: q for q in queries}
    calls, seconds, running = 0, 0.0, len(procs)
    for p in procs:
        p.start()
    try:
        while running:
            try:
                kind, payload = results.get(timeout=1.0)
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RunFailed(f"a worker process died (exit code {dead[0]}); the records that came back are "
                                    "kept, and a rerun resumes the rest") from None
                continue
            if kind == "record":
                record = QueryRecord.from_dict(payload)
                on_record(by_id[record.id], record)
            elif kind == "done":
                calls, seconds, running = calls + payload[0], max(seconds, payload[1]), running - 1
            else:
                raise RuntimeError(f"a worker process failed:\n{payload}")
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()
    return calls, seconds


def shards(queries: list[dict], workers: int, concurrency: int) -> list[tuple[list[dict], int]]:
    """(queries, queries in flight) of each worker: every ``workers``-th query, and ``concurrency`` split so that
    the workers together keep exactly that many in flight (no more workers than that)."""
    workers = min(workers, concurrency, len(queries))
    return [(queries[i::workers], concurrency // workers + (i < concurrency % workers)) for i in range(workers)]


def _work(agents, spec, shard: list[dict], concurrency: int, results, parent: int) -> None:
    _exit_with(parent)
    try:
        with agents(spec) as a:
            start = time.perf_counter()
            a.many(shard, concurrency, lambda q, record: results.put(("record", record.to_dict())))
            results.put(("done", (a.model_calls, time.perf_counter() - start)))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def _exit_with(parent: int) -> None:
    """End this worker when the process that started it is gone (killed: nobody would read its records)."""
    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
