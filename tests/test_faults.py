"""Nothing lost, nothing leaked: the evaluate stage against a faulty endpoint (tests/fault_openai.py).

A run hit by transient faults and a SIGKILL, then rerun, writes the records a clean run writes, each query once,
and its extra model calls are the retries and the calls in flight at the kill. The API key a run knows, echoed
back in every kind of reply, is in no file the run writes.
"""
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ark.io import write_jsonl
from ark.llm.cache import ResponseCache
from ark.llm.client import LLMClient
from ark.llm.settings import Backbone, RetryPolicy
from ark.secrets import MARKER, known_keys, scrub
from tests.conftest import ROOT, compose_cfg
from tests.fault_openai import ALL, CONTENT, PERMANENT, TRANSIENT, FaultEndpoint
from ark.llm.fake import search_then_answer

pytestmark = pytest.mark.e2e  # whole module: see pyproject's e2e marker

SEED = int(os.environ.get("ARK_FAULT_SEED", 7))  # another seed: other faults and another kill point
QUERIES = ["slender fingers", "lens of the eye", "zebra", "heart valve", "connective tissue gene", "tall stature"]
N_AGENTS, CONCURRENCY = 2, 2
TIMEOUT, HANG = 2.0, 2.5  # the client's timeout, and how long a hung request keeps it waiting
TIMINGS = {"wall_time", "model_time", "tool_time", "replayed_steps"}
CANARY = "sk-canary-4f1d0c9e7b2a41d8a6e3"


@pytest.fixture
def six_queries(tiny_project):
    from ark.stages import build_index

    cfg = compose_cfg(tiny_project + ["retriever.params.stemmer=null"])
    write_jsonl(Path(cfg.dataset.queries_dir) / "test.jsonl",
                [{"id": f"q{i}", "query": q, "answer_ids": [i % 5]} for i, q in enumerate(QUERIES, 1)])
    build_index.run(cfg)
    return tiny_project


def stage_args(project, url: str, out: Path, key_env: str | None = None, *extra) -> list[str]:
    """``python -m ark.stages.evaluate`` on the tiny graph, everything it writes under ``out``."""
    return [sys.executable, "-m", "ark.stages.evaluate", *project, "backbone=gpt-4.1", "backbone.model=openai/fake",
            f"backbone.api_base={url}", f"backbone.api_key_env={key_env or 'null'}", "retriever.params.stemmer=null",
            f"agent.n_agents={N_AGENTS}", "agent.T_max=4", f"eval.concurrency={CONCURRENCY}", "eval.progress=false",
            "llm.retry.max_attempts=5", "llm.retry.base_delay=0.01", "llm.retry.max_delay=0.05",
            f"llm.retry.timeout={TIMEOUT}", f"llm.cache={out}/cache/llm.sqlite", f"run.root={out}/runs",
            f"paths.logs={out}/logs", f"hydra.run.dir={out}/hydra", *extra]


def run_stage(args, **env) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def run_dir(out: Path) -> Path:
    (path,) = (out / "runs").iterdir()
    return path


def without_timings(line: str) -> dict:
    record = json.loads(line)
    record["agents"] = [{k: v for k, v in a.items() if k not in TIMINGS} for a in record["agents"]]
    return {k: v for k, v in record.items() if k not in TIMINGS}


# ------------------------------------------------------------------ transient faults and a kill
def test_faults_and_a_kill_then_rerun_lose_and_repeat_nothing(six_queries, tmp_path):
    clean = FaultEndpoint(faults=())
    with clean.serve() as server:
        done = run_stage(stage_args(six_queries, server.url, tmp_path / "clean"))
    assert done.returncode == 0, done.stderr[-2000:]
    clean_dir = run_dir(tmp_path / "clean")
    assert clean.calls == len(QUERIES) * N_AGENTS * 2  # search, then add and finish

    kill_at = random.Random(SEED).randint(1, clean.calls - 1)  # the request during which the stage is killed
    faulty, procs = FaultEndpoint(TRANSIENT, rate=0.2, seed=SEED, hang=HANG), []
    faulty.on_request = lambda n: n == kill_at and procs[0].send_signal(signal.SIGKILL)
    with faulty.serve() as server:
        args = stage_args(six_queries, server.url, tmp_path / "faulty")
        procs.append(subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env={**os.environ, "PYTHONPATH": str(ROOT)}))
        assert procs[0].wait(timeout=120) == -signal.SIGKILL
        before = len(faulty.log)
        faulty.on_request = None
        rerun = run_stage(args)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    faulty_dir = run_dir(tmp_path / "faulty")

    lines = (faulty_dir / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [f"q{i}" for i in range(1, len(QUERIES) + 1)]
    assert list(map(without_timings, lines)) == \
        list(map(without_timings, (clean_dir / "records.jsonl").read_text().splitlines()))
    for name in ("metrics.json", "stats.json", "scores.jsonl"):
        assert (faulty_dir / name).read_text() == (clean_dir / name).read_text(), name

    # the model calls: every one of the clean run's, plus retries, plus those in flight at the kill
    faults = [outcome for _, outcome in faulty.log if outcome != "ok"]
    ok_before = Counter(body for body, outcome in faulty.log[:before] if outcome == "ok")
    ok_after = Counter(body for body, outcome in faulty.log[before:] if outcome == "ok")
    asked_again = set(ok_before) & set(ok_after)
    assert set(ok_before) | set(ok_after) == {body for body, _ in clean.log}
    assert max(ok_before.values()) == 1 and max(ok_after.values()) == 1  # no answered call is asked again
    assert len(asked_again) <= N_AGENTS * CONCURRENCY  # at most the calls in flight at the kill
    assert len(faulty.log) == clean.calls + len(faults) + len(asked_again)
    assert faults and set(faults) <= set(TRANSIENT)
    for i, (body, outcome) in enumerate(faulty.log):  # each fault is followed by a retry of the same request
        assert outcome == "ok" or any(b == body for b, _ in faulty.log[i + 1:])
    print(f"\nclean: {clean.calls} calls; faulted: {len(faulty.log)} = {clean.calls} + {len(faults)} retried faults "
          f"{dict(Counter(faults))} + {len(asked_again)} asked again after the SIGKILL at request {kill_at} "
          f"({before} requests before it)")


# ------------------------------------------------------------------ every kind of fault, one request each
def fault_client(url: str, cache: ResponseCache | None = None) -> LLMClient:
    backbone = Backbone(name="fake", model="openai/fake", max_tokens=64, api_key_env="ARK_CANARY_API_KEY")
    return LLMClient(backbone, cache, RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, timeout=0.5),
                     api_base=url)


@pytest.mark.parametrize("kind", ALL)
def test_each_fault_is_retried_recorded_or_passed_on_without_the_key(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("ARK_CANARY_API_KEY", CANARY)
    endpoint = FaultEndpoint((kind,), rate=1.0, max_in_a_row=1, hang=1.0, echo_key=True)
    cache = ResponseCache(tmp_path / "llm.sqlite")
    with endpoint.serve() as server:
        result = asyncio.run(fault_client(server.url, cache).complete([{"role": "user", "content": "Question: x"}], None))
    if kind in TRANSIENT:  # retried, then answered
        assert result.error is None and result.attempts == 2 and [o for _, o in endpoint.log] == [kind, "ok"]
    elif kind in PERMANENT:  # recorded, not retried
        assert result.message is None and result.attempts == 1 and result.error.startswith(
            "AuthenticationError" if kind == "401" else "BadRequestError")
    else:  # a well-formed reply with bad content goes to the agent, whose tools answer it with an error
        assert result.error is None and kind in CONTENT
    text = json.dumps([result.message, result.error])
    assert CANARY not in text and (MARKER in text)
    assert all(CANARY.encode() not in p.read_bytes() for p in tmp_path.iterdir())  # llm.sqlite and its -wal


def test_the_scrub_knows_the_runs_keys_and_leaves_a_clean_reply_untouched():
    env = {"OPENAI_API_KEY": "sk-aaaaaaaaaa", "HF_TOKEN": "hf_bbbbbbbbbb", "MY_KEY": "short", "DEBUG_TOKEN": "1",
           "GREETING": "ccccccccccc"}
    assert known_keys("MY_KEY", env) == ["hf_bbbbbbbbbb", "sk-aaaaaaaaaa", "short"]
    keys = known_keys(None, env)
    reply = search_then_answer({"messages": [{"role": "user", "content": "Question: fingers"}]})
    assert scrub(reply, keys) is reply  # the same object: nothing a model sees changes
    leaky = {**reply, "content": "key sk-aaaaaaaaaa", "tool_calls": [
        {"function": {"name": "hf_bbbbbbbbbb", "arguments": '{"q": "sk-aaaaaaaaaa"}'}}]}
    assert "aaaaaaa" not in json.dumps(scrub(leaky, keys)) and "bbbbbbb" not in json.dumps(scrub(leaky, keys))
    assert leaky["content"] == "key sk-aaaaaaaaaa"  # the input is not changed in place


# ------------------------------------------------------------------ the canary: no file holds the key
def test_a_credential_inside_the_endpoint_url_is_refused_and_in_no_file_the_run_writes(six_queries, tmp_path):
    """``api_base`` with user info (https://user:secret@host/v1), which litellm cannot send as a credential: one
    line, exit 2, before any call; Hydra's .hydra/*.yaml, which Hydra writes before the stage runs, keep the URL with
    its credential replaced, and no file, log or message holds the secret."""
    secret = "URLSECRET-9f3b2c"
    out = tmp_path / "url"
    endpoint = FaultEndpoint(faults=())
    with endpoint.serve() as server:
        url = server.url.replace("http://", f"http://ark:{secret}@", 1)
        done = run_stage(stage_args(six_queries, url, out, None, "eval.allow_incomplete=true"))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: backbone 'gpt-4.1': backbone.api_base carries a credential (user:password@ or a key in its query), "
        "which litellm does not send as one: give the server's plain URL and the key in the environment variable "
        "backbone.api_key_env names"], done.stderr[-2000:]
    assert endpoint.log == [] and not list(tmp_path.rglob("records.jsonl"))
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    overrides = next(p for p in files if p.parent.name == ".hydra" and p.name == "overrides.yaml").read_text()
    assert f"http://{MARKER}@127.0.0.1" in overrides  # it was there, and was replaced
    assert [str(p) for p in files if secret.encode() in p.read_bytes()] == []
    assert secret not in done.stdout + done.stderr


def test_a_key_echoed_in_every_kind_of_reply_is_in_no_file_the_run_writes(six_queries, tmp_path):
    endpoint = FaultEndpoint(ALL, rate=0.5, seed=SEED, hang=HANG, echo_key=True)
    out = tmp_path / "canary"
    with endpoint.serve() as server:
        done = run_stage(stage_args(six_queries, server.url, out, "ARK_CANARY_API_KEY", "eval.allow_incomplete=true",
                                    f"run.publish={out}/published"), ARK_CANARY_API_KEY=CANARY)
    assert done.returncode == 0, done.stderr[-2000:]
    kinds = Counter(outcome for _, outcome in endpoint.log)
    errors = {"429", "500", "nonjson", *PERMANENT}  # replies whose error text carries the key
    assert kinds["ok"] and kinds.keys() & errors and kinds.keys() & set(CONTENT)  # it did echo everywhere
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"records.jsonl", "llm.sqlite", "metrics.json", "timing.json"} <= {p.name for p in files}
    hits = [str(p) for p in files if CANARY.encode() in p.read_bytes()]
    assert hits == [] and CANARY not in done.stdout + done.stderr
    records = (run_dir(out) / "records.jsonl").read_text()
    assert records.count(MARKER) >= kinds["ok"]  # the echoes arrived, and were replaced
    print(f"\ncanary run: {len(endpoint.log)} requests {dict(kinds)}; {len(files)} files, 0 hits; "
          f"{records.count(MARKER)} markers in records.jsonl")


# ------------------------------------------------------------------ a full disk
def test_a_cache_that_fills_up_degrades_to_no_cache_and_keeps_the_run_going(tmp_path, caplog):
    import sqlite3

    from ark.llm.cache import ResponseCache

    cache = ResponseCache(tmp_path / "llm.sqlite")
    cache.put("a", {"v": 1})
    real = cache._db

    class Full:  # a test double of a connection whose disk filled up: reads work, writes fail
        def execute(self, sql, *args):
            if sql.startswith("INSERT"):
                raise sqlite3.OperationalError("database or disk is full")
            return real.execute(sql, *args)

    cache._db = Full()
    cache.put("b", {"v": 2})  # no exception: the run goes on
    cache.put("c", {"v": 3})
    assert cache.full and cache.get("a") == {"v": 1} and cache.get("b") is None
    assert sum("cannot be written" in r.message for r in caplog.records) == 1  # one warning, not one per call


def test_a_cache_that_fills_up_mid_run_loses_no_query(six_queries, tmp_path, monkeypatch, caplog):
    """The whole engine, with an LLM cache whose disk fills after its first 5 replies: every query is still asked,
    answered and recorded (the probe of issue 38 lost all 40 queries' work), with one warning."""
    import sqlite3

    from ark import build
    from ark.llm.cache import ResponseCache
    from ark.runs.execute import execute

    opened = ResponseCache.__init__
    written = []

    def fills_up(self, *args, **kwargs):  # a test double of the disk under the cache: full after 5 inserts
        opened(self, *args, **kwargs)
        real = self._db

        class Filling:
            def execute(self, sql, *params):
                if sql.startswith("INSERT"):
                    if len(written) >= 5:
                        raise sqlite3.OperationalError("database or disk is full")
                    written.append(sql)
                return real.execute(sql, *params)

            def __getattr__(self, name):
                return getattr(real, name)

        self._db = Filling()

    monkeypatch.setattr(ResponseCache, "__init__", fills_up)
    out = tmp_path / "filling"
    endpoint = FaultEndpoint(faults=())
    with endpoint.serve() as server:
        args = stage_args(six_queries, server.url, out)[3:]  # the stage's overrides, run in this process
        result = execute(build.spec(compose_cfg(args)), "evaluate")
    assert len(written) == 5 and len(endpoint.log) > 5  # the cache filled up early in the run
    assert result["n_queries"] == len(QUERIES) and result["n_incomplete"] == 0
    assert len((run_dir(out) / "records.jsonl").read_text().splitlines()) == len(QUERIES)
    assert sum("cannot be written" in r.message for r in caplog.records) == 1


def test_a_full_disk_ends_a_stage_in_one_line_and_leaves_no_temporary_file(tmp_path, capsys, monkeypatch):
    import errno

    from ark.io import write_text_atomic
    from ark.stages import clear_errors

    target = tmp_path / "metrics.json"

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", full)

    with pytest.raises(SystemExit) as stopped:
        clear_errors(lambda cfg: write_text_atomic(target, "{}"))(None)
    lines = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: no space left to write ")
    assert list(tmp_path.iterdir()) == []  # neither the file nor its .tmp


def test_a_disk_that_fills_while_records_are_rewritten_leaves_no_temporary_file(tmp_path):
    """write_jsonl (a run's records and timings at finalize): the temporary file is removed when a write fails."""
    import errno

    from ark.io import write_jsonl

    def rows():
        yield {"id": "q1"}
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        write_jsonl(tmp_path / "records.jsonl", rows())
    assert list(tmp_path.iterdir()) == []  # neither the file nor its .tmp


def test_ctrl_c_ends_a_stage_in_one_line(capsys):
    from ark.stages import clear_errors

    def interrupted(cfg):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as stopped:
        clear_errors(interrupted)(None)
    lines = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 130 and len(lines) == 1 and lines[0].startswith("interrupted: ")


def test_a_full_disk_before_the_run_leaves_no_run_directory(six_queries, monkeypatch):
    """The run directory is made, then its lock or config.yaml cannot be written: the directory goes again."""
    import errno

    from ark.build import spec
    from ark.runs.store import Run
    from tests.conftest import compose_cfg

    run = Run(spec(compose_cfg(six_queries + ["backbone=rules"])), "evaluate")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("ark.runs.store.write_text_atomic", full)
    with pytest.raises(OSError):
        run.open()
    assert not run.dir.exists()
