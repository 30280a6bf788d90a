"""Per-stage wall times of one `make repro`, from the log it writes (logs/repro/<group>.log, every line stamped),
and, given samples of the machine's CPU counters taken during the run, how many cores each stage kept busy.

    python benchmarks/stage_times.py logs/repro/repro-20261125-215306.log
    python benchmarks/stage_times.py --record cpu.txt &     # beside `make repro`: /proc/stat every 10 s
    python benchmarks/stage_times.py logs/repro/<group>.log --cpu cpu.txt

A stage's time runs from its "Running stage" line to the next stage's line (or the log's end), so it includes the
stage's start-up and DVC's bookkeeping. Prints every stage, then the totals per stage kind and the whole run. Busy
cores: the machine's non-idle CPU time over the stage's interval (the samples nearest its ends) divided by the
interval: a figure for the whole machine, so run nothing else beside it; the log's stamps are local time of the
samples' day.
"""
from __future__ import annotations

import argparse
import bisect
import os
import re
import time
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

STAMP = re.compile(r"^(\d\d:\d\d:\d\d) (.*)$")
RUNNING = re.compile(r"Running stage '([^']+)'")


def stage_spans(lines: list[str]) -> tuple[list[tuple[str, datetime, datetime]], float]:
    """[(stage, start, end)] in run order (times of the log's first day), and the seconds from the first stamped
    line to the last."""
    stamps, starts = [], []
    day = timedelta(0)
    for line in lines:
        m = STAMP.match(line)
        if not m:
            continue
        t = datetime.strptime(m.group(1), "%H:%M:%S") + day
        if stamps and t < stamps[-1]:  # past midnight
            day += timedelta(days=1)
            t += timedelta(days=1)
        stamps.append(t)
        running = RUNNING.search(m.group(2))
        if running:
            starts.append((running.group(1), t))
    if not stamps:
        raise SystemExit("no stamped lines: give the log `make repro` writes under logs/repro/")
    ends = [t for _, t in starts[1:]] + [stamps[-1]]
    return [(name, t, end) for (name, t), end in zip(starts, ends)], (stamps[-1] - stamps[0]).total_seconds()


def stage_times(lines: list[str]) -> tuple[list[tuple[str, float]], float]:
    """[(stage, seconds)] in run order, and the seconds from the first stamped line to the last."""
    spans, total = stage_spans(lines)
    return [(name, (end - start).total_seconds()) for name, start, end in spans], total


def record(path: str, every: float = 10.0) -> None:
    """Append "<epoch seconds> <the cpu line of /proc/stat>" to ``path`` every ``every`` seconds, until killed."""
    with open(path, "a") as out:
        while True:
            out.write(f"{int(time.time())} {Path('/proc/stat').read_text().splitlines()[0]}\n")
            out.flush()
            time.sleep(every)


def busy_counter(path: str) -> tuple[list[float], list[float]]:
    """(epoch seconds, busy CPU seconds so far) of each sample: all time but idle and iowait."""
    tick = os.sysconf("SC_CLK_TCK")
    stamps, busy = [], []
    for line in Path(path).read_text().splitlines():
        epoch, _, *fields = line.split()
        counts = [int(f) for f in fields]
        stamps.append(float(epoch))
        busy.append((sum(counts[:8]) - counts[3] - counts[4]) / tick)  # user..steal, less idle and iowait
    return stamps, busy


def busy_cores(samples: tuple[list[float], list[float]], start: float, end: float) -> float | None:
    """Mean busy cores between the samples nearest ``start`` and ``end`` (None outside the samples)."""
    stamps, busy = samples
    if not stamps or start < stamps[0] - 10 or end > stamps[-1] + 10:
        return None

    def nearest(t: float) -> int:
        i = bisect.bisect_left(stamps, t)
        return min((j for j in (i - 1, i) if 0 <= j < len(stamps)), key=lambda j: abs(stamps[j] - t))

    a, b = nearest(start), nearest(end)
    return (busy[b] - busy[a]) / (stamps[b] - stamps[a]) if b > a else None


def main(path: str, cpu: str | None = None) -> None:
    spans, total = stage_spans(Path(path).read_text(errors="replace").splitlines())
    samples = busy_counter(cpu) if cpu else None
    day = datetime.fromtimestamp(samples[0][0]).date() if samples and samples[0] else None

    def epoch(t: datetime) -> float:  # a log stamp (1900-01-01 plus days past midnight) on the samples' day
        return (datetime.combine(day, datetime.min.time()) + (t - datetime(1900, 1, 1))).timestamp()

    by_kind, core_seconds, covered = defaultdict(float), defaultdict(float), defaultdict(float)
    print(f"{'stage':58} {'min':>7}" + (f" {'busy cores':>10}" if samples else ""))
    for name, start, end in spans:
        seconds = (end - start).total_seconds()
        kind = name.split("@")[0]
        by_kind[kind] += seconds
        cores = busy_cores(samples, epoch(start), epoch(end)) if samples else None
        if cores is not None:  # a stage shorter than the sampling interval has none
            core_seconds[kind] += cores * seconds
            covered[kind] += seconds
        print(f"{name:58} {seconds / 60:7.2f}" + (f" {cores:10.2f}" if cores is not None else ""))
    print(f"\n{'stage kind':58} {'min':>7}" + (f" {'busy cores':>10}" if samples else ""))
    for kind, seconds in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        busy = f" {core_seconds[kind] / covered[kind]:10.2f}" if covered[kind] else ""
        print(f"{kind:58} {seconds / 60:7.2f}" + busy)
    print(f"\n{len(spans)} stages run; the log spans {total / 60:.1f} min")
    whole = busy_cores(samples, epoch(spans[0][1]), epoch(spans[-1][2])) if samples and spans else None
    if whole is not None:
        minutes = (spans[-1][2] - spans[0][1]).total_seconds() / 60
        print(f"busy cores over the stages: {whole:.2f} on average, {whole * minutes:.1f} core-minutes")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", nargs="?")
    ap.add_argument("--cpu", help="samples written by --record during the run")
    ap.add_argument("--record", metavar="FILE", help="sample /proc/stat into FILE every 10 s until killed")
    args = ap.parse_args()
    if args.record:
        record(args.record)
    elif args.log:
        main(args.log, args.cpu)
    else:
        ap.error("give a log (or --record FILE)")
