"""`ark serve` beside llama-cpp-python's server on the same GGUF: the same recorded agent steps through each.

The prompts are the steps of a recorded Table 5 run (``--records``, default the teacher's synthetic run): each
assistant step's conversation so far, as plain chat turns (tool calls as JSON text, observations as user turns, so
that both servers read the same words through SmolLM2's chat template), greedy, at most 32 reply tokens. Per
server, one after the other on this machine:

- time to first token: a request for one token on 4 prompts neither server has seen (prefill-bound);
- 1 stream: 6 requests one after another; 8 streams: 8 other requests at once (prompt and reply tokens a second);
- the server's peak resident memory (``/proc``, every 50 ms).

llama-cpp-python is a benchmark-only dependency that builds from source; build it in a virtualenv of its own with
portable flags (a native build has crashed on AMX CPUs) and pass that environment's Python::

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \\
        /tmp/llenv/bin/pip install "llama-cpp-python[server]==0.3.36"
    python benchmarks/serve_side_by_side.py --llama-python /tmp/llenv/bin/python [--out <md>]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402
from serve_load import Memory, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def plain_turns(messages: list[dict]) -> list[dict]:
    """An agent's messages as system/user/assistant text turns (both servers read them alike)."""
    out = []
    for m in messages:
        if m["role"] == "assistant":
            calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                     for c in m.get("tool_calls") or []]
            out.append({"role": "assistant", "content": json.dumps(calls) if calls else (m.get("content") or "")})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": f"Observation: {m.get('content') or ''}"})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    return out


def prompts(records: Path, n: int) -> list[list[dict]]:
    """The first ``n`` agent steps' conversations of a run, the queries' steps interleaved."""
    steps = []
    for line in records.open():
        for a in json.loads(line)["agents"]:
            msgs = a["messages"]
            steps.append([plain_turns(msgs[:i]) for i, m in enumerate(msgs) if m["role"] == "assistant"])
    out, depth = [], 0
    while len(out) < n and any(depth < len(s) for s in steps):
        out += [s[depth] for s in steps if depth < len(s)]
        depth += 1
    return out[:n]


def ask(url: str, model: str, messages: list[dict], max_tokens: int) -> dict:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "seed": 0}
    req = urllib.request.Request(f"{url}/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=900) as r:
        usage = json.loads(r.read())["usage"]
    return {"s": time.perf_counter() - start, "in": usage["prompt_tokens"], "out": usage["completion_tokens"]}


def measure(url: str, model: str, mem: Memory, work: list[list[dict]]) -> dict:
    first, one, eight = work[:4], work[4:10], work[10:18]
    ttft = [ask(url, model, m, 1) for m in first]
    mem.reset()
    start = time.perf_counter()
    alone = [ask(url, model, m, 32) for m in one]
    one_s = time.perf_counter() - start
    start = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda m: ask(url, model, m, 32), eight))
    eight_s = time.perf_counter() - start
    return {"ttft_s": sum(r["s"] for r in ttft) / len(ttft),
            "ttft_prompt_tokens": sum(r["in"] for r in ttft) / len(ttft),
            "one": (one_s, sum(r["in"] for r in alone), sum(r["out"] for r in alone)),
            "eight": (eight_s, sum(r["in"] for r in together), sum(r["out"] for r in together)),
            "peak_gib": mem.peak() / 2**30}


def wait(proc: subprocess.Popen, url: str, log: Path) -> None:
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"{url}/models", timeout=1).read()
            return
        except OSError:
            time.sleep(0.5)


def serve(command: list[str], port: int, log: Path) -> tuple[subprocess.Popen, str]:
    """The server started with its output to ``log`` (a pipe nobody reads fills up and stops a chatty server)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    wait(proc, url, log)
    return proc, url


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llama-python", required=True, help="the Python of the virtualenv with llama-cpp-python[server]")
    p.add_argument("--records", default=None, help="a records.jsonl (default: the teacher's synthetic Table 5 run)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--out", help="also write the table (markdown) here")
    args = p.parse_args()
    from ark.llm.weights import default_gguf_path

    records = Path(args.records) if args.records else next(
        (ROOT / "results" / "runs" / "evaluate" / "teacher-synthetic").glob("*/records.jsonl"))
    work = prompts(records, 18)
    gguf = default_gguf_path()
    results = {}
    port = free_port()
    servers = {
        "ark serve": ([sys.executable, "-m", "ark.cli", "serve", "--port", str(port)], "smollm2"),
        "llama-cpp-python": ([args.llama_python, "-m", "llama_cpp.server", "--model", str(gguf), "--port", str(port),
                              "--n_ctx", "8192", "--n_threads", str(args.threads), "--n_batch", "512",
                              "--model_alias", "smollm2"], "smollm2"),
    }
    logs = Path(tempfile.mkdtemp(prefix="ark-side-by-side-"))
    for name, (command, model) in servers.items():
        proc, url = serve(command, port, logs / f"{name.split()[0]}.log")
        mem = Memory(proc.pid)
        try:
            results[name] = measure(url, model, mem, work)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            mem.stop.set()
        print(name, json.dumps(results[name]), file=sys.stderr, flush=True)
    lines = ["| server | time to first token (s; prompt tokens) | 1 stream: s, prompt tok/s, reply tok/s | "
             "8 streams: s, prompt tok/s, reply tok/s | peak memory (GiB) |", "|---|---|---|---|---|"]
    for name, r in results.items():
        cells = [f"{r['ttft_s']:.2f} ({r['ttft_prompt_tokens']:.0f})"]
        for s, n_in, n_out in (r["one"], r["eight"]):
            cells.append(f"{s:.1f}, {n_in / s:.0f}, {n_out / s:.1f}")
        lines.append(f"| {name} | {' | '.join(cells)} | {r['peak_gib']:.2f} |")
    text = "\n".join(lines) + f"\n\nGGUF: {gguf.name}; records: {records}\nmachine: {json.dumps(machine(('torch',)))}\n"
    print(text)
    if args.out:
        Path(args.out).write_text(f"`python benchmarks/serve_side_by_side.py {' '.join(sys.argv[1:])}`\n\n{text}")


if __name__ == "__main__":
    main()
