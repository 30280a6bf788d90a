"""``ark status [targets]`` (``make status``): which stages of a pipeline are stale and why, in a few lines, where
``dvc status`` lists every changed dependency and output of every stage.

A stale stage is listed once, under its most upstream cause: code (its fingerprint in code.yaml, or a Python file it
depends on), then params/config (a params file's keys, or a YAML config file), then data (a dependency file or
directory), then other (a changed command, an edited output, ``always_changed``), then outputs only (outputs
"not in cache" or "deleted", nothing else). Exits 0 when every stage is up to date, 1 when one is stale (as
``git diff --exit-code``), 2 with one ``error:`` line when dvc is missing or fails.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path, PurePosixPath

from ark.errors import UserError

GROUPS = {  # most upstream cause first
    "code": ("stale on code", "code"),
    "params": ("stale on params/config", "params/config"),
    "data": ("stale on data", "data"),
    "other": ("stale otherwise (a changed command, an edited output, always_changed)", "other"),
    "outputs": ("only outputs missing", "outputs only"),
}
MISSING = ("not in cache", "deleted")
NAMES_SHOWN = 24  # stage names listed per group
CHANGED_SHOWN = 8  # changed files listed per group


def dependency_cause(path: str, state) -> str:
    """A changed dependency's group. ``state`` is a dict of keys for a params file with changed keys, else a word."""
    name = PurePosixPath(path).name
    if name == "code.yaml" or (name.endswith(".py") and not isinstance(state, dict)):
        return "code"
    if isinstance(state, dict) or name.endswith((".yaml", ".yml", ".toml")):
        return "params"
    return "data"


def causes(entries: list) -> list[tuple[str, str]]:
    """(group, what changed) for each change ``dvc status --json`` lists for one stage."""
    found = []
    for entry in entries:
        if isinstance(entry, str):  # "always changed", "changed command", "changed checksum"
            found.append(("other", entry))
            continue
        for kind, changes in entry.items():
            if kind not in ("changed deps", "changed outs") or not isinstance(changes, dict):
                found.append(("other", kind))
                continue
            for path, state in changes.items():
                if kind == "changed deps":
                    found.append((dependency_cause(path, state), path))
                else:
                    found.append(("outputs" if state in MISSING else "other", path))
    return found


def classify(status: dict, stages: list[str]) -> dict:
    """The summary of ``dvc status --json`` (``status``) over the pipeline's ``stages``: per group the stages it
    holds and how many of them each changed file or reason put there; the count of stages and of those up to date."""
    groups = {group: {"stages": [], "changed": {}} for group in GROUPS}
    order = list(GROUPS)
    for stage, entries in status.items():
        found = causes(entries) or [("other", "unknown")]
        group = min((g for g, _ in found), key=order.index)
        groups[group]["stages"].append(stage)
        for what in dict.fromkeys(w for g, w in found if g == group):
            groups[group]["changed"][what] = groups[group]["changed"].get(what, 0) + 1
    total = len(set(stages) | set(status))
    return {"total": total, "up_to_date": total - len(status), "groups": groups}


def exit_code(summary: dict) -> int:
    return 1 if summary["up_to_date"] < summary["total"] else 0


def compact(names: list[str]) -> list[str]:
    """``evaluate@a``, ``evaluate@b`` as ``evaluate@{a, b}``: a foreach stage's entries under its name once."""
    entries: dict[str, list[str]] = {}
    for name in names:
        stage, at, entry = name.partition("@")
        entries.setdefault(stage + at, []).append(entry)
    return [stage + (items[0] if len(items) == 1 else "{" + ", ".join(items) + "}")
            for stage, items in entries.items()]


def wrapped(line: str, width: int) -> list[str]:
    return textwrap.wrap(line, width, initial_indent="  ", subsequent_indent="    ", break_long_words=False,
                         break_on_hyphens=False)


def text(summary: dict, target: str, width: int = 100) -> str:
    total, fresh = summary["total"], summary["up_to_date"]
    if fresh == total:
        return f"{target}: all {total} stages up to date"
    lines = [f"{target}: {total - fresh} of {total} stages stale, {fresh} up to date"]
    shown = []
    for group, (label, short) in GROUPS.items():
        stages, changed = summary["groups"][group]["stages"], summary["groups"][group]["changed"]
        if group == "other" and not stages:
            continue
        shown.append(short)
        lines.append(f"{label}: {len(stages)}")
        # what changed, most stages first; not for code.yaml (the group says it) nor each missing output
        listed = [] if group == "outputs" else [
            f"{what} ({n})" for what, n in sorted(changed.items(), key=lambda item: -item[1])
            if PurePosixPath(what).name != "code.yaml"]
        if listed:
            more = f", and {len(listed) - CHANGED_SHOWN} more" if len(listed) > CHANGED_SHOWN else ""
            lines += wrapped("changed (stages): " + ", ".join(listed[:CHANGED_SHOWN]) + more, width)
        if stages:
            more = f", and {len(stages) - NAMES_SHOWN} more" if len(stages) > NAMES_SHOWN else ""
            lines += wrapped(", ".join(compact(stages[:NAMES_SHOWN])) + more, width)
    lines.append(f"up to date: {fresh}")
    lines.append(f"(each stale stage is counted once, under its most upstream cause: {' > '.join(shown)})")
    return "\n".join(lines)


def dvc_executable() -> str:
    """The dvc of this Python's environment (the one ``make repro`` runs), else the first on PATH."""
    beside = Path(sys.executable).parent / "dvc"
    found = str(beside) if beside.is_file() else shutil.which("dvc")
    if not found:
        raise UserError("dvc not found beside this Python or on PATH (make install installs it)")
    return found


def dvc(*args: str) -> str:
    """dvc's standard output; its failure as a UserError, in one line."""
    command = [dvc_executable(), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        raise UserError(f"{command[0]}: {e.strerror or e}") from None
    if done.returncode != 0:
        message = done.stderr.split("ERROR: ", 1)[-1].strip().split("\n\n")[0]  # dvc's error, without its hints
        raise UserError(f"dvc {' '.join(args)}: {' '.join(message.split()) or f'exit status {done.returncode}'}")
    return done.stdout


def summarize(targets: list[str]) -> dict:
    stages = dvc("stage", "list", "--name-only", *targets).split()
    out = dvc("status", *targets, "--json")
    try:
        status = json.loads(out or "{}")
    except json.JSONDecodeError:
        raise UserError(f"dvc status --json printed no JSON: {out[:200]!r}") from None
    if not isinstance(status, dict):
        raise UserError(f"dvc status --json printed {type(status).__name__}, not an object")
    return classify(status, stages)


def main(targets: list[str], as_json: bool = False) -> int:
    try:
        summary = summarize(targets)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if as_json:
        print(json.dumps(summary, indent=1))
    else:
        print(text(summary, " ".join(targets), shutil.get_terminal_size().columns))
    return exit_code(summary)
