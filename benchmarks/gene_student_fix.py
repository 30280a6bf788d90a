"""An experiment for the gene student (issue 50): the same training, with the tool's name weighted more in the loss.

``gene_student.py --probe`` finds the student nearly indifferent, after the search, between exploring the
neighborhood and answering at once, on gene and disease questions alike: the choice is a token or two of each reply,
while the loss averages over every reply token (most of them the question copied into the call's arguments). Here the
first ``--tokens`` labelled tokens of each reply (``{"name": "<tool>"``) count ``--weight`` times in the loss; the
data, the order, the updates and every other setting are the distill stage's (the same training budget). Then the
probe again, and the gene questions of Table 5 (its sample's first ``--queries``; the committed student's figures on
them are Table 5's).

    python benchmarks/gene_student_fix.py [--weight 10] [--tokens 8] [--queries 20] [--out /tmp/gene-student-fix]

Needs the teacher runs and the graphs (``dvc repro`` or ``make pull``); trains on the CPU (about a quarter of an
hour on two cores) and writes only under ``--out``.
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import machine  # noqa: E402
from gene_student import probe  # noqa: E402

TEACHERS = [f"results/runs/collect/rules-{q}" for q in ("synthetic", "phenopackets", "phenopackets_gene")]


def weighted_loss_trainer(weight: float, tokens: int):
    """The distill stage's trainer with the first ``tokens`` labelled tokens of each reply weighted ``weight``."""
    import torch
    import torch.nn.functional as F

    from ark.distill import train
    from ark.distill.sft import IGNORE

    base = train.labelled_loss_trainer()

    class ToolNameWeighted(base):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs["labels"]
            labelled = (labels[:, 1:] != IGNORE)
            keep = labelled.any(0).nonzero().flatten()
            outputs = model(**{k: v for k, v in inputs.items() if k != "labels"}, use_cache=False,
                            logits_to_keep=keep)
            logits, targets = outputs.logits.float(), labels[:, keep + 1]
            weights = torch.ones_like(labelled, dtype=torch.float32)
            for row in range(labelled.shape[0]):  # position within its reply: a run of labelled positions
                at = 0
                for p, on in enumerate(labelled[row].tolist()):
                    at = at + 1 if on else 0
                    if on and at <= tokens:
                        weights[row, p] = weight
            w = weights[:, keep] * (targets != IGNORE)
            ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="none")
            loss = (ce * w.flatten()).sum() / w.sum().clamp(min=1)
            return (loss, outputs) if return_outputs else loss

    return lambda: ToolNameWeighted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weight", type=float, default=10.0)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--probe", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("/tmp/gene-student-fix"))
    args = parser.parse_args()

    from ark.config import compose
    from ark.distill import train
    from ark.stages import distill, evaluate

    student = args.out / "students" / "embedded"
    if not (student / "adapter_config.json").exists():
        train.labelled_loss_trainer = weighted_loss_trainer(args.weight, args.tokens)
        report = distill.run(compose(["dataset=biokg", "distill=embedded", f"distill.teacher=[{','.join(TEACHERS)}]",
                                      f"distill.out={student}", "distill.publish=null", "logger=none"]))
        print(f"trained: {json.dumps(report)[:400]}", flush=True)
        for snapshot in report["budgets"]:  # the budget snapshots (the same sequential training): not probed here
            shutil.rmtree(snapshot)
    out = {"machine": machine(), "weight": args.weight, "tokens": args.tokens}
    out["choice after the search"] = probe(ROOT / "results" / "runs", args.out / "students", args.probe)
    # the committed student's figures on the same queries are Table 5's (its student row, the block of this n)
    result = evaluate.run(compose([
        "dataset=biokg_lpo", "queries=phenopackets_gene", "+experiment=table5/student",
        f"backbone.local.adapter={student}", f"eval.limit={args.queries}", f"run.root={args.out}/runs",
        "run.publish=null", "logger=none", "eval.progress=false"]))
    out["gene questions, weighted student"] = {k: result.get(k) for k in ("hit@1", "hit@5", "mrr", "n_queries")}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
