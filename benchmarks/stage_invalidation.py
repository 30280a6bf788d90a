"""How many entries of the root pipeline an edit to a source file makes stale, as DVC resolves dvc.yaml (its deps,
after deps.yaml's vars): an entry is stale when it depends on the file or on a directory holding it.

    python benchmarks/stage_invalidation.py [FILE ...]

``tests/test_invalidation.py`` checks the same with ``dvc status`` after a real edit in a committed copy."""
import contextlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ["src/ark/llm/decoding.py", "src/ark/index/dense.py", "src/ark/agent/policies.py", "src/ark/report/tables/table5.py"]


def stale(paths: list[str]) -> dict[str, list[str]]:
    from dvc.repo import Repo

    with contextlib.chdir(ROOT), Repo(".") as repo:
        stages = [s for s in repo.index.stages if s.path_in_repo == "dvc.yaml"]
        deps = {s.addressing: [Path(d.fs_path).relative_to(ROOT) for d in s.deps] for s in stages}
    return {p: sorted(name for name, ds in deps.items() if any(d == Path(p) or d in Path(p).parents for d in ds))
            for p in paths} | {"(stages)": sorted(deps)}


if __name__ == "__main__":
    found = stale(sys.argv[1:] or FILES)
    total = len(found.pop("(stages)"))
    for path, names in found.items():
        kinds = {}
        for n in names:
            kinds[n.split("@")[0]] = kinds.get(n.split("@")[0], 0) + 1
        print(f"{path}: {len(names)} of {total} stages stale ({', '.join(f'{k} {v}' for k, v in kinds.items())})")
