"""Stage distill: a teacher's trajectories -> a LoRA adapter on the embedded model (label-free).

``python -m ark.stages.distill distill=<recipe> distill.teacher=<run root or run dir, or a [list] of them> [distill.out=<dir>]``
reads the teacher run's ``records.jsonl`` (no gold in it), renders every trajectory as the model reads it at
inference (``ark.distill.sft``), holds out ``distill.val_fraction`` of the queries (by id) for the validation
loss, trains LoRA (``ark.distill.train``) and writes the adapter with ``curve.json``, ``report.json`` and a
model card ``README.md``. The adapter is then a backbone: ``backbone=student backbone.local.adapter=<dir>``.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from ark import build
from ark.data.queries import split_of
from ark.errors import UserError
from ark.io import atomic_dir, write_json
from ark.runs.store import load_run
from ark.stages import clear_errors, launch
from ark.tracking import log_summary, stage_run

PUBLISHED = ("report.json", "README.md", "curve.json")
GROUPS = ("distill", "dataset", "ablation")  # config groups its results depend on (the teacher run is a file)


def teacher_run(path: str | Path) -> Path:
    """A run directory, or a run root holding exactly one (as a DVC entry's ``results/runs/<stage>/<entry>``)."""
    path = Path(path)
    if (path / "config.yaml").exists():
        return path
    runs = sorted(p.parent for p in path.glob("*/config.yaml"))
    if len(runs) != 1:
        raise UserError(f"distill.teacher: expected one run directory in {path}, found {len(runs)}")
    return runs[0]


def run(cfg: DictConfig, model=None, tokenizer=None) -> dict:
    """``model``/``tokenizer`` default to the embedded SmolLM2 (tests pass a tiny one)."""
    d = cfg.distill
    if not d.get("teacher"):
        raise UserError("distill.teacher must name the teacher's run (a run directory or a run root), or a list")
    teachers = [teacher_run(p) for p in ([d.teacher] if isinstance(d.teacher, str) else d.teacher)]
    runs = [load_run(t) for t in teachers]
    for t, (config, _) in zip(teachers, runs):
        if config.get("dataset", {}).get("name") != cfg.dataset.name:
            raise UserError(f"the teacher run {t} is on {config.get('dataset', {}).get('name')}, not on "
                            f"{cfg.dataset.name}")
    records = [r for _, recs in runs for r in recs]
    tools = build.toolbox(cfg).schemas()  # the tool set the student will be served with
    from ark.distill.sft import sft_samples
    from ark.distill.train import load_base, train_lora

    if model is None:
        model, tokenizer = load_base(d, cfg.paths.models)

    samples = list(sft_samples(records, tools, tokenizer, d.max_tokens))
    fractions = (1 - d.val_fraction, d.val_fraction, 0.0)
    train = [s for s in samples if split_of(s["id"], fractions) == "train"]
    val = [s for s in samples if split_of(s["id"], fractions) == "val"]
    if not train:
        raise UserError(f"no training samples from {d.teacher} ({len(samples)} samples, {len(records)} records)")
    start = time.perf_counter()
    with atomic_dir(d.out) as tmp:
        report = train_lora(model, tokenizer, train, val, d, tmp, cfg.seed)
        report["seconds"] = round(time.perf_counter() - start, 1)
        card = {"teachers": [{"run": t.name, "config": c} for t, (c, _) in zip(teachers, runs)],
                "recipe": OmegaConf.to_container(d, resolve=True), "report": report}
        write_json(tmp / "report.json", card)
        (tmp / "README.md").write_text(model_card(card))
    if d.get("publish"):
        Path(d.publish).mkdir(parents=True, exist_ok=True)
        for name in PUBLISHED:
            shutil.copyfile(Path(d.out) / name, Path(d.publish) / name)
    return {**report, "out": str(d.out)}


def model_card(card: dict) -> str:
    r, rep = card["recipe"], card["report"]
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
        f"{rep['train_tokens']:,} training tokens; loss on assistant tokens only.",
        f"- Recipe: LoRA r {r['lora']['r']}, alpha {r['lora']['alpha']}, dropout {r['lora']['dropout']} on "
        f"{r['lora']['target_modules']}; learning rate {r['learning_rate']}, {r['epochs']} epoch(s), "
        f"checkpoint by validation loss.",
        f"- Result: train loss {rep['train_loss']}, best validation loss {rep['best_eval_loss']}, "
        f"{rep['steps']} steps in {rep.get('seconds')} s. Curve: `curve.json`.",
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
