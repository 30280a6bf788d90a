"""Why the distilled student answers diseases to gene questions: what it was trained on, and what it does.

1. The training data: per teacher run (``collect``, one per query set), its trajectories, the node types of the
   teacher's answers (the first node, and all of them) and the ``node_type`` arguments of its neighborhood calls.
2. On the gene questions of Table 5 (``evaluate@{teacher,student,student_mid,student_small}-phenopackets_gene``):
   per run, the tool calls by name, the ``node_type`` arguments, the type of the first answer node, and how many
   queries have a gene anywhere in the answer.
3. With ``--probe K``: the choice after the search. On the first K teacher trajectories of each query set, the
   model is shown the teacher's conversation up to its second reply (the question, its search and the search's
   result) and scored on the two ways that reply can begin: log P('{"name": "search_in_neighborhood"') minus
   log P('{"name": "add_to_answer"'), for the base model and each student (float32, so the same on every CPU).
   The teacher explores the neighborhood there on gene questions and answers at once on disease questions; a
   student that tells them apart scores higher on the first. The same on the whole-budget student's own gene
   trajectories (Table 5's ``student-phenopackets_gene``), at the point where it answered.

    python benchmarks/gene_student.py [--runs results/runs] [--json] [--probe 8 --students data/students]

Reads the run directories (DVC outputs: ``dvc repro`` or ``make pull`` first) and the graphs they name.
"""
import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import machine  # noqa: E402

from ark.agent.records import QueryRecord  # noqa: E402
from ark.report.runs import run_graph  # noqa: E402
from ark.runs.store import load_run  # noqa: E402

EVALUATED = ("teacher", "student", "student_mid", "student_small")


def tool_calls(trajectory) -> list[tuple[str, dict]]:
    """(name, arguments) of each tool call in a trajectory's messages: native ``tool_calls``, or the JSON objects
    ``{"name": …, "arguments": …}`` of a reply in the text protocol (the students' rendering)."""
    out = []
    decoder = json.JSONDecoder()
    for m in trajectory.messages:
        if m.get("role") != "assistant":
            continue
        calls = [c.get("function") or {} for c in m.get("tool_calls") or []]
        text, i = m.get("content") or "", 0
        while (i := text.find("{", i)) >= 0:
            try:
                value, end = decoder.raw_decode(text, i)
            except ValueError:
                i += 1
                continue
            if isinstance(value, dict) and "name" in value:
                calls.append(value)
            i = end
        for fn in calls:
            args = fn.get("arguments")
            try:
                args = json.loads(args) if isinstance(args, str) else (args or {})
            except ValueError:
                args = {}
            out.append((fn.get("name"), args if isinstance(args, dict) else {}))
    return out


def node_types(args: dict) -> list[str]:
    value = args.get("node_type")
    return [value] if isinstance(value, str) else [str(v) for v in value] if isinstance(value, list) else []


def describe(config: dict, records: list[QueryRecord]) -> dict:
    """What the agents of one run called and answered, by node type."""
    graph = run_graph(config)
    calls, filters, first, answered, with_gene = (collections.Counter(), collections.Counter(), collections.Counter(),
                                                   collections.Counter(), 0)
    for record in records:
        for t in record.agents:
            for name, args in tool_calls(t):
                calls[name] += 1
                filters.update(node_types(args) if name == "search_in_neighborhood" else [])
            types = [graph.type_name(v) for v in t.answer if 0 <= v < graph.num_nodes]
            first[types[0] if types else "(no answer)"] += 1
            answered.update(types)
            with_gene += any(ty.startswith("gene") for ty in types)
    agents = sum(len(r.agents) for r in records)
    return {"queries": len(records), "trajectories": agents, "tool calls": dict(calls),
            "node_type arguments": dict(filters), "first answer node": dict(first), "answer nodes": dict(answered),
            "trajectories with a gene in the answer": with_gene}


CHOICES = ('{"name": "add_to_answer"', '{"name": "search_in_neighborhood"')


def probe(runs: Path, students: Path, k: int, models: list[str] | None = None) -> dict:
    """{model: {teacher run: [log-odds of exploring over answering at the teacher's second reply]}}."""
    import torch

    from ark.build import spec, toolbox
    from ark.config import compose
    from ark.distill.sft import sample_turns
    from ark.llm.weights import apply_adapter, default_gguf_path, load_gguf

    cfg = compose(["dataset=biokg", "distill=embedded"])
    tools = toolbox(spec(cfg, "distill")).schemas()  # the tool list the students were trained with
    prefixes = {}
    for entry in sorted((runs / "collect").glob("*")):
        for run_dir in sorted(p.parent for p in entry.glob("*/config.yaml")):
            prefixes[entry.name] = [sample_turns(r.agents[0].messages, tools) for r in load_run(run_dir)[1][:k]]
    for run_dir in sorted(p.parent for p in (runs / "evaluate" / "student-phenopackets_gene").glob("*/config.yaml")):
        # the whole-budget student's own gene trajectories: its search, as it made it, and what it saw
        prefixes["the student's own (student-phenopackets_gene)"] = [
            sample_turns(r.agents[0].messages, tools) for r in load_run(run_dir)[1][:k]]
    out = {}
    for name in ["base"] + sorted(p.parent.name for p in students.glob("*/adapter_config.json")):
        if models and name not in models:
            continue
        model, tokenizer = load_gguf(default_gguf_path(), "float32", cfg.paths.models)
        if name != "base":
            model = apply_adapter(model, students / name)
        model.eval()
        out[name] = {}
        for teacher, conversations in prefixes.items():
            odds = []
            for turns in conversations:
                replies = [i for i, t in enumerate(turns) if t["role"] == "assistant"]
                if len(replies) < 2:
                    continue
                second = replies[1]
                prompt = tokenizer(tokenizer.apply_chat_template(turns[:second], tokenize=False,
                                                                 add_generation_prompt=True),
                                   add_special_tokens=False)["input_ids"]
                logp = []
                for choice in CHOICES:
                    cont = tokenizer(choice, add_special_tokens=False)["input_ids"]
                    with torch.no_grad():
                        scores = model(torch.tensor([prompt + cont])).logits[0].float().log_softmax(-1)
                    logp.append(sum(scores[len(prompt) + i - 1, t].item() for i, t in enumerate(cont)))
                odds.append(round(logp[1] - logp[0], 2))
            out[name][teacher] = odds
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=ROOT / "results" / "runs")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--probe", type=int, default=0, metavar="K",
                        help="also score the choice after the search on the first K teacher trajectories of each set")
    parser.add_argument("--students", type=Path, default=ROOT / "data" / "students")
    parser.add_argument("--models", nargs="*", help="with --probe: only these (base, or a student's directory name)")
    args = parser.parse_args()
    out = {"machine": machine(), "training": {}, "gene questions": {}}
    for entry in sorted((args.runs / "collect").glob("*")):
        for run_dir in sorted(p.parent for p in entry.glob("*/config.yaml")):
            config, records = load_run(run_dir)
            out["training"][entry.name] = describe(config, records)
    for name in EVALUATED:
        for run_dir in sorted(p.parent for p in (args.runs / "evaluate" / f"{name}-phenopackets_gene").glob("*/config.yaml")):
            config, records = load_run(run_dir)
            out["gene questions"][name] = describe(config, records)
    if not out["training"] and not out["gene questions"]:
        raise SystemExit(f"no collect or Table 5 gene runs under {args.runs}: run dvc repro first")
    if args.probe:
        out["choice after the search"] = probe(args.runs, args.students, args.probe, args.models)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"machine: {out['machine']['cpu']}")
    for part in ("training", "gene questions"):
        print(f"\n## {part}")
        for name, found in out[part].items():
            print(f"- {name}: " + "; ".join(f"{k} {v}" for k, v in found.items()))
    if args.probe:
        print("\n## choice after the search: log P(search_in_neighborhood) - log P(add_to_answer) at the teacher's "
              "second reply (mean; each trajectory)")
        for name, found in out["choice after the search"].items():
            for teacher, odds in found.items():
                print(f"- {name} on {teacher}: {sum(odds) / max(len(odds), 1):+.2f}; {odds}")


if __name__ == "__main__":
    main()
