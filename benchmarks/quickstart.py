"""The README's quick start and Python example, run as a stranger would: in a fresh copy of this tree's tracked
files (no data, no runs, no ``../shared``), with the environment of ``make install``. Prints each step's time,
peak memory and whether its output shows what the README says it shows; then the disk it took.

    python benchmarks/quickstart.py [--venv .venv] [--keep DIR] [--write]

``--write`` writes ``benchmarks/results/quickstart.{json,md}`` (the README quotes the Markdown). The README's steps
are the ```bash and ```python fences of its sections "Quick start" and "From Python"; a ```text fence right after
one is what that step prints: each of its lines, in order, is a line of the output, where ``…`` stands for any text
and a line ``…`` for any lines. ``tests/test_quickstart.py`` runs the same steps and fails on a difference.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("Quick start", "From Python")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


@dataclass
class Step:
    language: str  # bash or python
    code: str
    expected: list[str] | None = None  # the lines of the ```text fence that follows it


@dataclass
class Result:
    code: str
    seconds: float
    peak_rss_mib: float
    returncode: int
    missing: list[str] = field(default_factory=list)  # expected lines not found, in order
    output: str = ""


def steps(readme: Path = ROOT / "README.md") -> list[Step]:
    """The runnable fences of the README's quick-start sections, each with the output it is said to print."""
    text = readme.read_text()
    found = []
    for title in SECTIONS:
        m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
        if m is None:
            raise SystemExit(f"README.md has no section '## {title}'")
        for f in FENCE.finditer(m.group(1)):
            language, body = f.group(1), f.group(2)
            if language in ("bash", "python"):
                found.append(Step(language, body))
            elif language == "text" and found and found[-1].expected is None:
                found[-1].expected = body.rstrip("\n").split("\n")
    return found


def missing_lines(expected: list[str], output: str) -> list[str]:
    """The expected lines that the output does not show in this order (``…``: any text; a line ``…``: any lines)."""
    lines = [line.rstrip() for line in output.splitlines()]
    position, missing = 0, []
    for want in expected:
        if want.strip() == "…":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.rstrip().split("…")))
        hit = next((i for i in range(position, len(lines)) if pattern.fullmatch(lines[i])), None)
        if hit is None:
            missing.append(want)
        else:
            position = hit + 1
    return missing


def fresh_copy(target: Path) -> Path:
    """The tracked files of this tree (as they are now, edits included) in ``target``, a git repository of its own
    with the DVC config, as a clone has them."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    for command in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=quickstart", "-c", "user.email=quickstart@localhost", "commit", "-qm",
                     "a fresh copy"]):
        subprocess.run(command, cwd=target, check=True, capture_output=True)
    return target


def run_step(step: Step, tree: Path, venv: Path, timeout: float) -> Result:
    """One step in ``tree`` (a Python step in a new directory outside it) with ``venv`` first on PATH and the copy's
    own sources imported; ``source`` lines are what that PATH stands for."""
    env = {**os.environ, "PATH": f"{venv.resolve() / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(tree / "src"), "VIRTUAL_ENV": str(venv.resolve())}
    env.pop("ARK_MIRROR", None)  # a stranger has no mirror
    cwd = tree
    if step.language == "python":  # from outside the clone, as a notebook elsewhere would (ark.api finds the root)
        command = [str(venv / "bin" / "python"), "-c", step.code]
        cwd = Path(tempfile.mkdtemp(prefix="ark-python-step-"))
    else:
        code = "\n".join(line for line in step.code.splitlines() if not line.startswith("source "))
        command = ["bash", "-eo", "pipefail", "-c", code]
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = start + timeout
        while True:  # wait4: the step's own peak memory (its largest process), not this script's
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        log.seek(0)
        output = log.read().decode("utf-8", "replace")
    returncode = os.waitstatus_to_exitcode(status)
    missing = missing_lines(step.expected, output) if step.expected else []
    return Result(step.code, round(seconds, 1), round(usage.ru_maxrss / 1024, 1), returncode, missing, output)


def disk_mib(path: Path) -> float:
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    return round(total / 2**20, 1)


def markdown(record: dict) -> str:
    def label(code: str) -> str:
        return "the Python example" if "import" in code else f"`{code.splitlines()[-1][:60]}`"

    rows = "\n".join(f"| {label(r['code'])} | {r['seconds']} | {r['peak_rss_mib']} |"
                     for r in record["steps"] if not r["code"].startswith("source"))
    disk = record["disk_mib"]
    return (f"**The quick start on {record['cpu']} ({record['cores']} cores), a fresh copy**\n\n"
            "| step (its last line) | seconds | peak memory (MiB) |\n|---|---|---|\n" + rows + "\n\n"
            f"Disk: the environment `.venv` {disk['venv']} MiB; after these steps `data/` {disk['data']} MiB, "
            f"`results/` {disk['results']} MiB, `cache/` and `logs/` {disk['cache_logs']} MiB. "
            f"Total {record['seconds']} s. Command: `python benchmarks/quickstart.py --write`.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv")
    parser.add_argument("--keep", type=Path, help="run in this (new) directory and keep it")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/quickstart.{json,md}")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a step may take")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from ark.machine import cpu_name

    with tempfile.TemporaryDirectory(prefix="ark-quickstart-") as tmp:
        tree = args.keep or Path(tmp)
        tree.mkdir(parents=True, exist_ok=True)
        fresh_copy(tree)
        results = []
        for step in steps(tree / "README.md"):
            result = run_step(step, tree, args.venv, args.timeout)
            results.append(result)
            verdict = "ok" if result.returncode == 0 and not result.missing else \
                f"FAILED (exit {result.returncode}; not shown: {result.missing})"
            print(f"{result.seconds:7.1f} s {result.peak_rss_mib:8.1f} MiB  {step.code.splitlines()[-1][:70]}  "
                  f"{verdict}", flush=True)
            if verdict != "ok":
                print(result.output[-3000:])
                return 1
        record = {"cpu": cpu_name(), "cores": os.cpu_count(), "seconds": round(sum(r.seconds for r in results), 1),
                  "disk_mib": {"venv": disk_mib(args.venv), "data": disk_mib(tree / "data"),
                               "results": disk_mib(tree / "results"),
                               "cache_logs": round(disk_mib(tree / "cache") + disk_mib(tree / "logs"), 1)
                               if (tree / "cache").exists() else disk_mib(tree / "logs")},
                  "steps": [{k: v for k, v in asdict(r).items() if k != "output"} for r in results]}
    print(markdown(record))
    if args.write:
        out = ROOT / "benchmarks" / "results"
        (out / "quickstart.json").write_text(json.dumps(record, indent=1) + "\n")
        (out / "quickstart.md").write_text(markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
