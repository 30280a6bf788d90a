"""`ark serve` and four concurrent 7 MB prompts (under the 8 MiB body limit, far past what the context window can
take): each answer's status and seconds, and the server's resident memory before, at its peak and 5 s after.

Starts `ark serve` (the embedded model) as `serve_load.py` does, answers one small request so that the model has run,
then sends the four bodies at once.

    python benchmarks/serve_big_bodies.py [--out benchmarks/results/serve_big_bodies.md]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402
from serve_load import Memory, post, start_server  # noqa: E402

BODY_CHARS = 7 * 10**6


def big(url: str, i: int) -> tuple[int, float, str]:
    """(status, seconds, error message) of one 7 MB chat request."""
    words = ("gene disease pathway " * (BODY_CHARS // 21 + 1))[:BODY_CHARS]
    body = json.dumps({"model": "smollm2", "messages": [{"role": "user", "content": f"{i} {words}"}]}).encode()
    req = urllib.request.Request(f"{url}/chat/completions", body, {"Content-Type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            r.read()
            return r.status, time.perf_counter() - start, ""
    except urllib.error.HTTPError as e:
        return e.code, time.perf_counter() - start, json.load(e)["error"]["message"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="also write the table (markdown) here")
    args = p.parse_args()
    proc, url, _ = start_server([])
    mem = Memory(proc.pid)
    rows = []
    try:
        post(url, {"model": "smollm2", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8})
        time.sleep(2)
        idle = mem.now()
        mem.reset()
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda i: big(url, i), range(4)))
        peak = mem.peak()
        time.sleep(5)
        after = mem.now()
        for i, (status, seconds, message) in enumerate(answers):
            rows.append((f"7 MB prompt {i + 1} of 4 at once", f"{status} in {seconds:.2f} s: {message[:110]}"))
        rows += [("resident memory idle, after one small request", f"{idle / 2**30:.2f} GiB"),
                 ("peak while the four were answered", f"{peak / 2**30:.2f} GiB"),
                 ("5 s later", f"{after / 2**30:.2f} GiB ({after / idle:.2f}x idle)")]
    finally:
        proc.kill()
        mem.stop.set()
    table = "\n".join(["| measure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
    text = f"{table}\n\nmachine: {json.dumps(machine(('torch', 'transformers')))}\n"
    print(text)
    if args.out:
        Path(args.out).write_text(f"`python benchmarks/serve_big_bodies.py`\n\n{text}")


if __name__ == "__main__":
    main()
