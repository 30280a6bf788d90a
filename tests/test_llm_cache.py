"""The LLM response cache with several workers: processes of one machine share one SQLite file; workers on several
machines write a file each, merged afterwards (ark.llm.cache_merge)."""
import json
import multiprocessing
import traceback

import pytest

from ark.errors import UserError
from ark.llm.cache import ResponseCache, cache_rows
from ark.llm.cache_merge import main as merge_main
from ark.llm.cache_merge import merge

N_PROCESSES, N_KEYS, N_FILES = 4, 150, 100


def _worker(directory: str, i: int, start, errors) -> None:
    """Open fresh cache files when every worker does (each one created by all of them at once), then on one of them
    write its own keys and shared ones, reading back its own and a neighbour's."""
    try:
        for f in range(N_FILES):
            start.wait(timeout=60)
            cache = ResponseCache(f"{directory}/llm-{f}.sqlite")
            cache.put(f"w{i}", {"worker": i})
        for j in range(N_KEYS):
            cache.put(f"w{i}-{j}", {"worker": i, "j": j})
            assert cache.get(f"w{i}-{j}") == {"worker": i, "j": j}
            cache.get(f"w{(i + 1) % N_PROCESSES}-{j}")
            cache.put(f"shared-{j}", {"j": j})
    except Exception:
        start.abort()  # the others stop waiting for this one
        errors.put(traceback.format_exc())


@pytest.mark.e2e
def test_processes_sharing_one_cache_file_lose_no_write_and_never_see_it_locked(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    start, errors = ctx.Barrier(N_PROCESSES), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), i, start, errors)) for i in range(N_PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    failures = [errors.get() for _ in range(errors.qsize())] if not errors.empty() else []
    assert not failures, failures[0]
    assert [p.exitcode for p in procs] == [0] * N_PROCESSES
    assert all(len(dict(cache_rows(tmp_path / f"llm-{f}.sqlite"))) >= N_PROCESSES for f in range(N_FILES))
    rows = dict(cache_rows(tmp_path / f"llm-{N_FILES - 1}.sqlite"))
    assert len(rows) == N_PROCESSES + N_PROCESSES * N_KEYS + N_KEYS
    assert all(json.loads(rows[f"w{i}-{j}"]) == {"worker": i, "j": j}
               for i in range(N_PROCESSES) for j in range(N_KEYS))


def test_merging_worker_caches_adds_what_is_missing_once_and_keeps_replies_already_there(tmp_path):
    target, a, b = (ResponseCache(tmp_path / f"{name}.sqlite") for name in ("llm", "llm-0", "llm-1"))
    target.put("k0", {"reply": "target's"})
    a.put("k0", {"reply": "a's"})
    a.put("k1", {"reply": "a's"})
    b.put("k1", {"reply": "b's"})  # the same request answered differently by another worker
    b.put("k2", {"reply": "b's"})
    sources = [tmp_path / "llm-0.sqlite", tmp_path / "llm-1.sqlite", tmp_path / "llm.sqlite"]  # a glob may hold it

    assert merge(tmp_path / "llm.sqlite", sources) == {"files": 2, "rows": 4, "added": 2}
    merged = dict(cache_rows(tmp_path / "llm.sqlite"))
    assert {k: json.loads(v)["reply"] for k, v in merged.items()} == {"k0": "target's", "k1": "a's", "k2": "b's"}
    assert merged["k2"] == dict(cache_rows(tmp_path / "llm-1.sqlite"))["k2"]  # copied byte for byte
    assert merge(tmp_path / "llm.sqlite", sources)["added"] == 0
    assert dict(cache_rows(tmp_path / "llm.sqlite")) == merged
    assert not (tmp_path / "llm.sqlite-wal").exists() or (tmp_path / "llm.sqlite-wal").stat().st_size == 0


def test_a_base_that_is_not_a_cache_is_a_clear_error(tmp_path):
    (tmp_path / "notes.txt").write_text("not a database\n" * 100)
    with pytest.raises(UserError, match="llm.cache_base .*notes.txt: not an LLM response cache"):
        ResponseCache(tmp_path / "llm-0.sqlite", base=tmp_path / "notes.txt")


@pytest.mark.parametrize("bad", ["missing.sqlite", "notes.txt"])
def test_merging_a_file_that_is_not_a_cache_exits_2_and_writes_nothing(tmp_path, capsys, bad):
    ResponseCache(tmp_path / "llm-0.sqlite").put("k", {"reply": "x"})
    (tmp_path / "notes.txt").write_text("not a database\n" * 100)
    with pytest.raises(SystemExit) as exit_:
        merge_main([str(tmp_path / "llm.sqlite"), str(tmp_path / "llm-0.sqlite"), str(tmp_path / bad)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {tmp_path / bad}")
    assert not (tmp_path / "llm.sqlite").exists()
