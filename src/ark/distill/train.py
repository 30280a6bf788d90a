"""LoRA distillation: trl ``SFTTrainer`` + peft on tokenized SFT samples (``ark.distill.sft``).

The paper's recipe (§4.3, A.2): next-token loss on assistant tokens only, one epoch, AdamW, learning rate 1e-5,
the checkpoint with the lowest validation loss; LoRA r 32, alpha 64, dropout 0.1 on all linear layers (the
reference code's values). ``conf/distill/*.yaml`` hold it and its CPU-sized variants.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ark.errors import UserError


def load_base(d, models_dir: str):
    """The model to distill into: ``d.base_model`` (a local Hugging Face directory; nothing is downloaded) or the
    embedded SmolLM2, with ``d.attn`` as its attention."""

    from ark.distill.attention import PACKED_SDPA, register

    if d.attn == PACKED_SDPA:
        register()
    if d.base_model is None:
        from ark.llm.weights import default_gguf_path, load_gguf

        model, tokenizer = load_gguf(default_gguf_path(), d.dtype, models_dir)
        model.set_attn_implementation(d.attn)
        return model, tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(d.base_model).is_dir():
        raise UserError(f"distill.base_model: {d.base_model} is not a local model directory")
    from ark.llm.weights import torch_dtype

    model = AutoModelForCausalLM.from_pretrained(d.base_model, dtype=torch_dtype(d.dtype),
                                                 attn_implementation=d.attn, local_files_only=True)
    return model, AutoTokenizer.from_pretrained(d.base_model, local_files_only=True)


def lora_config(d):
    from peft import LoraConfig

    return LoraConfig(r=d.lora.r, lora_alpha=d.lora.alpha, lora_dropout=d.lora.dropout,
                      target_modules=d.lora.target_modules, task_type="CAUSAL_LM")


def sft_config(d, out_dir: Path, seed: int, has_val: bool):
    from trl import SFTConfig

    eval_every = d.eval_steps if has_val else None
    # transformers renamed gradient_checkpointing to activation_checkpointing (5.2x); GPU hosts may have either
    fields = {f.name for f in dataclasses.fields(SFTConfig)}
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    return SFTConfig(
        **{checkpointing: d.gradient_checkpointing},
        output_dir=str(out_dir / "checkpoints"),
        num_train_epochs=d.epochs,
        max_steps=d.max_steps if d.max_steps else -1,
        learning_rate=d.learning_rate,
        lr_scheduler_type=d.scheduler,
        warmup_steps=d.warmup,  # < 1: a fraction of the steps
        per_device_train_batch_size=d.batch_size,
        per_device_eval_batch_size=d.batch_size,
        gradient_accumulation_steps=d.grad_accum,
        bf16=d.bf16,
        use_liger_kernel=d.liger and _liger_installed(),
        max_length=None if d.pack else d.max_tokens,  # packed rows are cut to it already
        padding_free=d.pack,  # one packed row per step, position ids restarting at every trajectory
        logging_steps=d.logging_steps,
        eval_strategy="steps" if has_val else "no",
        eval_steps=eval_every,
        save_strategy="steps" if has_val else "no",
        save_steps=eval_every,
        save_total_limit=2,
        load_best_model_at_end=has_val,  # early stopping / checkpoint choice on validation loss
        metric_for_best_model="eval_loss",
        greater_is_better=False,
        seed=seed,
        data_seed=seed,
        report_to=[],
        remove_unused_columns=False,
        dataset_kwargs={"skip_prepare_dataset": True},  # samples are tokenized and masked already
        use_cpu=d.device == "cpu",
        save_only_model=True,
    )


def _liger_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("liger_kernel") is not None


def train_lora(model, tokenizer, train: list[dict], val: list[dict], d, out_dir: str | Path, seed: int = 0) -> dict:
    """Train a LoRA adapter on ``model``; save it (and its tokenizer) to ``out_dir``; return the training curve
    and the best validation loss."""
    from datasets import Dataset
    from trl import SFTTrainer

    from ark.distill.sft import pack

    out_dir = Path(out_dir)
    columns = ("input_ids", "labels")
    tokens = sum(len(s["input_ids"]) for s in train)
    n_train, n_val = len(train), len(val)
    if d.pack:  # trajectories end to end in rows of max_tokens; attention stays within each (packed_sdpa)
        train, val = pack(train, d.max_tokens), pack(val, d.max_tokens)
        columns += ("seq_lengths",)
    to_dataset = lambda rows: Dataset.from_list([{c: r[c] for c in columns} for r in rows])  # noqa: E731
    trainer = SFTTrainer(model=model, args=sft_config(d, out_dir, seed, bool(val)), train_dataset=to_dataset(train),
                         eval_dataset=to_dataset(val) if val else None, processing_class=tokenizer,
                         peft_config=lora_config(d))
    result = trainer.train()
    trainer.save_model(str(out_dir))  # the adapter (the best checkpoint when validating)
    curve = [{k: v for k, v in row.items()} for row in trainer.state.log_history]
    (out_dir / "curve.json").write_text(json.dumps(curve, indent=1))
    evals = [row["eval_loss"] for row in curve if "eval_loss" in row]
    return {"train_loss": round(float(result.training_loss), 4), "steps": int(result.global_step),
            "best_eval_loss": round(min(evals), 4) if evals else None, "train_samples": n_train,
            "val_samples": n_val, "train_tokens": tokens, "train_rows": len(train),
            "train_seconds": round(float(result.metrics.get("train_runtime", 0.0)), 1),
            "dtype": str(model.dtype).removeprefix("torch.")}
