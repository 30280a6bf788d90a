"""Stage distill: a teacher's trajectories -> a LoRA adapter on the embedded model (label-free).

``python -m ark.stages.distill distill=<recipe> distill.teacher=<run root or run dir, or a [list] of them> [distill.out=<dir>]``
reads the teacher run's ``records.jsonl`` (no gold in it), renders every trajectory as the model reads it at
inference (``ark.distill.sft``), holds out ``distill.val_fraction`` of the queries (by publication for case reports,
else by id) for the validation loss, trains LoRA (``ark.distill.train``) and writes the adapter with ``curve.json``, ``report.json`` and a
model card ``README.md``. The adapter is then a backbone: ``backbone=student backbone.local.adapter=<dir>``.

``distill.budgets`` ({name: k}): the students of smaller teacher budgets from the same training. The samples go
in query order, the teacher runs interleaved (each run's first query, then each run's second, ...), one update
each at a learning rate that does not depend on the number of updates; the adapter after the updates on the first
k queries of every run is then exactly the student trained on those alone, and is written to the sibling
directory ``name`` of ``distill.out`` (and of ``distill.publish``).
"""
from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ark import build
from ark.config import resolved
from ark.data.queries import publication_of, split_of
from ark.distill.settings import distill_settings
from ark.errors import UserError
from ark.io import atomic_dir, write_json
from ark.runs.identity import graph_setting, same_graph_up_to_cut
from ark.runs.store import load_run
from ark.stages import clear_errors, launch
from ark.tracking import log_summary, stage_run

PUBLISHED = ("report.json", "README.md", "curve.json")
TIMINGS = "timing.json"  # beside the published files, git-ignored (as a published run's)
GROUPS = ("distill", "dataset", "ablation")  # config groups its results depend on (the teacher run is a file)
BUILDS = ("retriever", "queries")  # groups whose classes it makes besides (the run spec's: ark.stage_deps)


def teacher_run(path: str | Path) -> Path:
    """A run directory, or a run root holding exactly one (as a DVC entry's ``results/runs/<stage>/<entry>``)."""
    path = Path(path)
    if (path / "config.yaml").exists():
        return path
    runs = sorted(p.parent for p in path.glob("*/config.yaml"))
    if len(runs) != 1:
        raise UserError(f"distill.teacher: expected one run directory in {path}, found {len(runs)}")
    return runs[0]


def held_out_units(configs: list[dict], data_dir: str) -> dict[str, str]:
    """{query id: what the validation split holds out together} for the teacher runs' queries: a case report's
    publication (its cases share a patient family and a text; one in training and another in validation would
    leak), any other query itself. Read from the query files the runs name, never their gold."""
    from ark.report.runs import queries_of_run

    return {q["id"]: publication_of(q) for config in configs
            for q in queries_of_run(config, (f"paths.data={data_dir}",), limit=False)}


def run(cfg: DictConfig, model=None, tokenizer=None) -> dict:
    """``model``/``tokenizer`` default to the embedded SmolLM2 (tests pass a tiny one)."""
    recipe = resolved(cfg.distill)
    d = distill_settings(recipe)
    teachers = [teacher_run(p) for p in d.teachers]
    runs = [load_run(t) for t in teachers]
    spec = build.spec(cfg, "distill")
    graph = graph_setting(spec)
    for t, (config, _) in zip(teachers, runs):  # its trajectories name nodes by index: they must mean the same
        if not same_graph_up_to_cut(config.get("dataset") or {}, graph):
            raise UserError(f"the teacher run {t} is on {config.get('dataset', {}).get('name')}, whose nodes are not "
                            f"those of {cfg.dataset.name} (a leave-publication-out cut of it would be)")
    budgets = dict(d.budgets or {})
    tools = build.toolbox(spec).schemas()  # the tool set the student will be served with
    from ark.distill.sft import distinct, sft_samples
    from ark.distill.train import load_base, train_lora

    if model is None:
        model, tokenizer = load_base(d, cfg.paths.models)

    samples = []
    for i, (_, recs) in enumerate(runs):  # records are in query order
        place = {r.id: p for p, r in enumerate(recs)}
        samples += [{**s, "place": (place[s["id"]], i)} for s in sft_samples(recs, tools, tokenizer, d.max_tokens)]
    collected = len(samples)
    if d.distinct:
        samples = distinct(samples)
    if budgets:
        samples.sort(key=lambda s: s["place"])  # stable: a query's agents stay in order
    fractions = (1 - d.val_fraction, d.val_fraction, 0.0)
    unit = held_out_units([config for config, _ in runs], cfg.paths.data) if d.val_fraction else {}
    part = {s["id"]: split_of(unit.get(s["id"], s["id"]), fractions) for s in samples}
    train = [s for s in samples if part[s["id"]] == "train"]
    val = [s for s in samples if part[s["id"]] == "val"]
    if not train:
        n_records = sum(len(recs) for _, recs in runs)
        raise UserError(f"no training samples from {d.teacher} ({len(samples)} samples, {n_records} records)")
    # each budget's directory and number of updates: the samples of the first k queries of every run
    outs = {name: Path(d.out).parent / name for name in budgets}
    updates = {name: sum(s["place"][0] < k for s in train) for name, k in budgets.items()}
    if any(n == 0 for n in updates.values()):
        raise UserError(f"distill.budgets {budgets}: a budget without training samples")
    start = time.perf_counter()
    teacher_cards = [{"run": t.name, "config": c} for t, (c, _) in zip(teachers, runs)]
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(atomic_dir(d.out))
        tmps = {name: stack.enter_context(atomic_dir(out)) for name, out in outs.items()}
        report = train_lora(model, tokenizer, train, val, d, tmp, cfg.seed,
                            {tmps[name]: updates[name] for name in budgets} or None)
        report["timings"]["seconds"] = round(time.perf_counter() - start, 1)
        report["repeated_trajectories"] = collected - len(samples)  # dropped with distill.distinct
        parts = report.pop("snapshots", {})
        cards = {tmp: {"teachers": teacher_cards, "recipe": recipe, "report": report}}
        for name, k in budgets.items():
            cards[tmps[name]] = {"teachers": teacher_cards, "recipe": recipe, "queries_per_teacher_run": k,
                                 "report": {**parts[str(tmps[name])], "of": Path(d.out).name}}
        # times out of the adapter directory: its content is the student's identity, and a retraining with the
        # same data and seed is the same student
        timings = {directory: card["report"].pop("timings") for directory, card in cards.items()}
        for directory, card in cards.items():
            write_json(directory / "report.json", card)
            (directory / "README.md").write_text(model_card(card))
    if d.publish:
        for out, directory in [(Path(d.out), tmp), *((outs[name], tmps[name]) for name in budgets)]:
            published = Path(d.publish).parent / out.name if out != Path(d.out) else Path(d.publish)
            published.mkdir(parents=True, exist_ok=True)
            for name in PUBLISHED:
                shutil.copyfile(out / name, published / name)
            write_json(published / TIMINGS, timings[directory])  # git-ignored
    return {**report, "timings": timings[tmp], "out": str(d.out),
            "budgets": {str(outs[name]): updates[name] for name in budgets}}


def model_card(card: dict) -> str:
    r, rep = card["recipe"], card["report"]
    k = card.get("queries_per_teacher_run")
    teachers = [f"`{t['config']['backbone']['name']}` (temperature {t['config']['backbone'].get('temperature')}) on "
                f"{t['config']['dataset']['name']} / {t['config']['queries']['name']} / {t['config']['split']}, "
                f"{t['config']['agent']['n_agents']} trajectories per query (run `{t['run']}`)"
                for t in card["teachers"]]
    base = r.get("base_model") or "the embedded SmolLM2-135M-Instruct"
    return "\n".join([
        f"# ARK student: LoRA on {base} ({r['name']} recipe)",
        "",
        "- Teacher: " + "; ".join(teachers) + "; label-free: no gold, no filtering by correctness.",
        f"- Data: {rep['train_samples']} training and {rep['val_samples']} validation trajectories, "
        f"{rep['train_tokens']:,} training tokens; loss on assistant tokens only."
        + (f" The trajectories of the first {k} queries of each teacher run: the `{rep['of']}` training after "
           f"its first {rep['steps']} updates." if k else ""),
        f"- Recipe: LoRA r {r['lora']['r']}, alpha {r['lora']['alpha']}, dropout {r['lora']['dropout']} on "
        f"{r['lora']['target_modules']}; learning rate {r['learning_rate']} ({r['scheduler']}), {r['epochs']} "
        f"epoch(s), " + ("checkpoint by validation loss." if rep["val_samples"] else "the last checkpoint."),
        f"- Result: train loss {rep['train_loss']}, "
        + (f"best validation loss {rep['best_eval_loss']}, " if rep["val_samples"] else "")
        + f"{rep['steps']} steps. Curve: `curve.json`; the training's times: `{TIMINGS}` beside the published "
        "report (not part of the student's identity).",
        "- Serve: `backbone=student backbone.local.adapter=<this directory>`.",
        "",
    ])


def log_curve(log, curve: list[dict]) -> None:
    """The training curve to the stage's W&B run: every logged trainer step (loss, learning rate, validation loss)."""
    for row in curve:
        log.log({k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "step"}, step=int(row["step"]))


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "distill") as log:
        result = run(cfg)
        log_curve(log, json.loads((Path(cfg.distill.out) / "curve.json").read_text()))
        log_summary(log, result)
    print(json.dumps(result))


if __name__ == "__main__":
    launch(main)
