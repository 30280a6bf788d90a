"""Where the time of the run ``ark serve`` prints goes, on the server's side: prefill (and how many prompt tokens the
kept prompts spared), batched decoding steps, grammar, sampling.

Starts ``ark serve`` (``ark.serve.server``, the product's server and model) in this process with
*embedded_split.py*'s timers around the model's pieces, runs the evaluation it prints as *serve_run.py* does (5
queries, a fresh run root, no response cache) and prints the split with the run's wall time::

    python benchmarks/serve_split.py [--port 8012] [--out benchmarks/results/serve_split.json] [serve overrides ...]

The model computes one forward pass at a time, so its parts add up; ``rest`` is the wall time outside them (the
agents' tools and HTTP between calls, and the grammar work of one request beside another's pass).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/common.py, however this file is loaded
from common import machine  # noqa: E402
from embedded_split import Split, attached  # noqa: E402
from serve_run import printed_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8012)
    parser.add_argument("--out", help="also write the result (JSON) here")
    args, overrides = parser.parse_known_args()
    from ark.serve import run_command, server

    split = Split()
    with attached(split), tempfile.TemporaryDirectory(prefix="ark-serve-split-") as tmp:
        chat, backbone = server(overrides, "127.0.0.1", args.port)
        with chat:
            command = run_command(backbone, chat.url)
            run = printed_run(command, tmp)
            start = time.perf_counter()
            proc = subprocess.run(run, cwd=ROOT, capture_output=True, text=True)
            wall = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    calls = re.search(r"model calls this run=(\d+)", output)
    result = {"command": command, "overrides": overrides, "exit": proc.returncode, "wall_s": round(wall, 1),
              "model_calls": int(calls.group(1)) if calls else None,
              "closing_line": next((line for line in reversed(output.splitlines()) if line.startswith("evaluate ")),
                                   output[-500:]),
              "split": split.table(wall), "prompts": split.reuse(), "machine": machine(("torch", "transformers"))}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["exit"] == 0 else 1)
