"""`ark serve` under agent-length load: one stream against eight, a repeated preamble, memory under a burst of
twenty, and the stop on Ctrl-C in the middle of a request.

Starts `ark serve` (the embedded model, its defaults unless --set) as a subprocess on a free port and sends it
chat requests shaped like an agent's: a shared preamble of about 1,500 tokens (a system prompt of tool
descriptions and node lines), a question of its own, a reply of at most 32 tokens, greedy. It reads the server's
resident memory from /proc every 50 ms. Prints one table and, with --out, writes it with the machine beside it.

    python benchmarks/serve_load.py [--set backbone.local.decode_rows=8] [--out benchmarks/results/serve_load.md]
    python benchmarks/serve_load.py --burst-only [--set backbone.local.dtype=bfloat16]  # memory under the burst alone
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def preamble(seed: int) -> str:
    """About 1,500 tokens of system prompt: tool descriptions and node lines (``seed`` varies the node lines)."""
    lines = ["You retrieve the nodes of a biomedical knowledge graph that answer a question. Tools:",
             "search(query, k): BM25 over every node's text; returns [id] type \"name\" lines.",
             "neighbors(node, node_type, query): the node's one-hop neighbors of that type, ranked by the query.",
             "answer(nodes): the ordered list of node ids that answer the question; ends the episode.",
             "Known nodes:"]
    types = ("disease", "gene/protein", "drug", "phenotype", "pathway")
    for i in range(50):
        n = (i * 7919 + seed * 104729) % 90000
        lines.append(f"[{n}] {types[n % 5]} \"node {n} of the {types[n % 5]} family, seen in step {i % 20}\"")
    return "\n".join(lines)


def request(system: str, question: str, max_tokens: int = 32) -> dict:
    return {"model": "smollm2", "temperature": 0, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}


def post(url: str, body: dict, timeout: float = 600) -> tuple[float, int]:
    """(seconds, completion tokens) of one request."""
    start = time.perf_counter()
    req = urllib.request.Request(f"{url}/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        reply = json.loads(r.read())
    return time.perf_counter() - start, reply["usage"]["completion_tokens"]


class Memory:
    """The resident memory of ``pid`` sampled every 50 ms: ``peak()`` since the last ``reset()``, ``now()``."""

    def __init__(self, pid: int):
        self.pid, self.max, self.stop = pid, 0, threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def now(self) -> int:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _sample(self):
        while not self.stop.is_set():
            self.max = max(self.max, self.now())
            time.sleep(0.05)

    def reset(self):
        self.max = self.now()

    def peak(self) -> int:
        return self.max


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(overrides: list[str]) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    proc = subprocess.Popen([sys.executable, "-m", "ark.cli", "serve", "--port", str(port), *overrides], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            # SIGINT as a terminal has it, even where this script runs in the background (which
                            # ignores it, and a process started ignoring it is not stopped by Ctrl-C)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    url, start = f"http://127.0.0.1:{port}/v1", time.perf_counter()
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"ark serve exited {proc.returncode}:\n{proc.stdout.read()[-3000:]}")
        try:
            urllib.request.urlopen(f"{url}/models", timeout=1).read()
            return proc, url, time.perf_counter() - start
        except OSError:
            time.sleep(0.5)


def concurrent(url: str, bodies: list[dict]) -> tuple[float, int]:
    """(wall seconds, completion tokens) of ``bodies`` sent at once."""
    start = time.perf_counter()
    with ThreadPoolExecutor(len(bodies)) as pool:
        results = list(pool.map(lambda b: post(url, b), bodies))
    return time.perf_counter() - start, sum(n for _, n in results)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", nargs="*", default=[], help="overrides for ark serve")
    p.add_argument("--out", help="also write the table (markdown) here")
    p.add_argument("--burst-only", action="store_true",
                   help="only the repeated preamble, the burst of 20 and the memory after it (no streams, no Ctrl-C)")
    args = p.parse_args()
    proc, url, load_s = start_server(args.set)
    mem = Memory(proc.pid)
    rows: list[tuple[str, str]] = []

    def add(row: tuple[str, str]) -> None:
        rows.append(row)
        print(f"{row[0]}: {row[1]}", file=sys.stderr, flush=True)

    add(("overrides", " ".join(args.set) or "(defaults)"))
    add(("start until listening", f"{load_s:.1f} s"))
    try:
        shared = preamble(0)
        # a repeated preamble: its first request against a second with another question
        first, _ = post(url, request(shared, "Which genes cause achondroplasia?"))
        again, _ = post(url, request(shared, "Which drugs treat hypertension?"))
        add(("repeated preamble: second request / first", f"{again:.2f} / {first:.2f} s = {again / first:.2f}"))
        idle = mem.now()
        add(("resident memory, idle after two requests", f"{idle / 2**30:.2f} GiB"))
        if not args.burst_only:
            streams(url, shared, add)
        mem.reset()
        burst_s, _ = concurrent(url, [request(preamble(1 + i % 4), f"Burst question {i} about node {i * 41}?")
                                      for i in range(20)])
        peak = mem.peak()
        time.sleep(5)
        after = mem.now()
        add(("20 at once (4 preambles): wall, peak resident memory",
                     f"{burst_s:.1f} s, {peak / 2**30:.2f} GiB"))
        add(("resident memory 5 s after the burst", f"{after / 2**30:.2f} GiB ({after / idle:.2f}x idle)"))
        if not args.burst_only:  # Ctrl-C in the middle of a long request
            threading.Thread(target=lambda: _quiet_post(url, request(preamble(9), "Describe every node.", 160)),
                             daemon=True).start()
            time.sleep(3)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        if not args.burst_only:
            add(("Ctrl-C mid-request until the process exited",
                 f"{time.perf_counter() - sent:.1f} s (exit {proc.returncode})"))
    finally:
        if proc.poll() is None:
            proc.kill()
        mem.stop.set()
    info = machine(("torch", "transformers"))
    table = "\n".join(["| measure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
    text = f"{table}\n\nmachine: {json.dumps(info)}\n"
    print(text)
    if args.out:
        Path(args.out).write_text(f"`python benchmarks/serve_load.py {' '.join(sys.argv[1:])}`\n\n{text}")


def streams(url: str, shared: str, add) -> None:
    """One stream of 4 requests against 8 streams at once, on the same preamble."""
    one = [post(url, request(shared, f"Question {i}: which pathways involve node {i * 31}?")) for i in range(4)]
    one_s, one_tok = sum(s for s, _ in one), sum(n for _, n in one)
    add(("1 stream: 4 requests one after another",
         f"{one_s:.1f} s, {len(one) / one_s:.3f} req/s, {one_tok / one_s:.1f} reply tokens/s"))
    eight_s, eight_tok = concurrent(url, [request(shared, f"Question {i}: which diseases relate to node {i * 37}?")
                                          for i in range(8)])
    add(("8 streams: 8 requests at once",
         f"{eight_s:.1f} s, {8 / eight_s:.3f} req/s, {eight_tok / eight_s:.1f} reply tokens/s"))
    add(("8 streams / 1 stream, requests a second", f"{(8 / eight_s) / (len(one) / one_s):.2f}x"))


def _quiet_post(url: str, body: dict) -> None:
    try:
        post(url, body)
    except OSError:
        pass


if __name__ == "__main__":
    main()
