"""Per-stage wall times of one `make repro`, from the log it writes (logs/repro/<group>.log, every line stamped).

    python benchmarks/stage_times.py logs/repro/repro-20261125-215306.log

A stage's time runs from its "Running stage" line to the next stage's line (or the log's end), so it includes the
stage's start-up and DVC's bookkeeping. Prints every stage, then the totals per stage kind and the whole run.
"""
from __future__ import annotations

import re
import sys
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

STAMP = re.compile(r"^(\d\d:\d\d:\d\d) (.*)$")
RUNNING = re.compile(r"Running stage '([^']+)'")


def stage_times(lines: list[str]) -> tuple[list[tuple[str, float]], float]:
    """[(stage, seconds)] in run order, and the seconds from the first stamped line to the last."""
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
    return [(name, (end - t).total_seconds()) for (name, t), end in zip(starts, ends)], \
        (stamps[-1] - stamps[0]).total_seconds()


def main(path: str) -> None:
    times, total = stage_times(Path(path).read_text(errors="replace").splitlines())
    by_kind = defaultdict(float)
    print(f"{'stage':58} {'min':>7}")
    for name, seconds in times:
        by_kind[name.split("@")[0]] += seconds
        print(f"{name:58} {seconds / 60:7.2f}")
    print(f"\n{'stage kind':58} {'min':>7}")
    for kind, seconds in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"{kind:58} {seconds / 60:7.2f}")
    print(f"\n{len(times)} stages run; the log spans {total / 60:.1f} min")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
