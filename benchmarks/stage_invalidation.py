"""How many entries of the root pipeline an edit to a source file reruns: the entries whose code fingerprint
(code.yaml, ``ark.stage_deps``) the edit changes, for a comment appended to the file and for one statement added at the
top of one of its definitions (a behaviour change there).

    python benchmarks/stage_invalidation.py [FILE:DEFINITION ...]

``tests/test_invalidation.py`` checks the same with ``dvc status`` after real edits in a committed copy."""
import ast
import sys
from pathlib import Path

from ark import stage_deps

ROOT = Path(__file__).resolve().parents[1]
EDITS = ["src/ark/io.py:write_json", "src/ark/config.py:compose", "src/ark/errors.py:UserError",
         "src/ark/settings.py:from_mapping", "src/ark/runs/store.py:Run", "src/ark/tools/toolbox.py:Toolbox",
         "src/ark/agent/loop.py:run_agent", "src/ark/runs/execute.py:execute", "src/ark/runs/rank.py:execute_ranking",
         "src/ark/agent/policies.py:RulesPolicy", "src/ark/llm/decoding.py:ToolCallGrammar"]


def module_of(path: str) -> str:
    return ".".join(Path(path).relative_to("src").with_suffix("").parts).removesuffix(".__init__")


def behaviour_changed(text: str, name: str) -> str:
    """``text`` with one statement added at the top of its top-level definition ``name``."""
    tree = ast.parse(text)
    node = next(n for n in tree.body if getattr(n, "name", None) == name)
    node.body.insert(0, ast.parse("_an_edit = 1").body[0])
    return ast.unparse(tree)


def rerun(entries: dict, module: str, text: str) -> list[str]:
    """The entries whose fingerprint changes when ``module``'s source is ``text``."""
    before = {name: e.fingerprint() for name, e in entries.items()}
    with stage_deps.edited({module: text}):
        return sorted(name for name, e in entries.items() if e.fingerprint() != before[name])


def by_kind(names: list[str]) -> str:
    kinds = {}
    for n in names:
        kinds[n.split("@")[0]] = kinds.get(n.split("@")[0], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in kinds.items())


if __name__ == "__main__":
    entries = {e.name: e for group in stage_deps.entries(ROOT / "dvc.yaml").values() for e in group}
    print(f"| file | a comment | one statement added in | entries rerun (of {len(entries)}) |")
    print("|---|---|---|---|")
    for edit in sys.argv[1:] or EDITS:
        path, name = edit.split(":")
        text = (ROOT / path).read_text(encoding="utf-8")
        commented = rerun(entries, module_of(path), text + "\n# an edit\n")
        changed = rerun(entries, module_of(path), behaviour_changed(text, name))
        print(f"| `{path.removeprefix('src/ark/')}` | {len(commented)} | `{name}` | {len(changed)} "
              f"({by_kind(changed) or 'none'}) |")
