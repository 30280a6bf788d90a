"""Walk counts of one evaluate run on the tiny graph (rules backbone, 1 agent, 1 query): following execute(spec(cfg))
through the project's own code, the distinct src/ark files its calls enter, and the back-and-forths (a call or
return that re-enters a file already left). A measure of how far a reader follows one run through the code; run it
on two commits to compare them.

    python benchmarks/execute_walk.py /tmp/walk    # a scratch directory for the tiny project it builds
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' tiny graph

from tests.conftest import compose_cfg
from tests.helpers import tiny_graph
from ark.io import write_jsonl

p = Path(sys.argv[1])
base = [f"paths.data={p}/data", f"paths.results={p}/results", f"paths.root={p}", "logger=none", "eval.progress=false",
        "backbone=rules", "agent.n_agents=1", "retriever.params.stemmer=null"]
cfg = compose_cfg(base)
tiny_graph().save(cfg.dataset.graph_dir)
write_jsonl(Path(cfg.dataset.queries_dir) / "test.jsonl", [{"id": "q1", "query": "slender fingers", "answer_ids": [3]}])
from ark.stages import build_index
build_index.run(cfg)
from ark.build import spec
from ark.runs.execute import execute
import ark.runs.execute  # noqa

src = str(Path(ark.runs.execute.__file__).parents[1])
path = []

def prof(frame, event, arg):
    if event in ("call", "return"):
        f = frame.f_code.co_filename
        if f.startswith(src) and (not path or path[-1] != f):
            path.append(f)

cfg = compose_cfg(base)
sys.setprofile(prof)
execute(spec(cfg), "evaluate")
sys.setprofile(None)
seen, back = set(), 0
for i, f in enumerate(path):
    if f in seen:
        back += 1
    seen.add(f)
print(f"files {len(seen)}, back-and-forths {back}, file switches {len(path) - 1}")
