"""LoRA distillation: trl ``SFTTrainer`` + peft on tokenized SFT samples (``ark.distill.sft``).

The paper's recipe (§4.3, A.2): next-token loss on assistant tokens only, one epoch, AdamW, learning rate 1e-5,
the checkpoint with the lowest validation loss; LoRA r 32, alpha 64, dropout 0.1 on all linear layers (the
reference code's values). ``conf/distill/*.yaml`` hold it and its CPU-sized variants.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

from typing import TYPE_CHECKING

from ark.errors import UserError

if TYPE_CHECKING:
    from ark.distill.settings import DistillSettings, LoraSettings


def load_base(d: DistillSettings, models_dir: str):
    """The model to distill into: ``d.base_model`` (a local Hugging Face directory; nothing is downloaded) or the
    embedded SmolLM2, with ``d.attn`` as its attention."""

    from ark.distill.attention import PACKED, register

    if d.attn in PACKED:
        register(d.attn)
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


def lora_config(lora: LoraSettings):
    from peft import LoraConfig

    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=lora.target_modules, task_type="CAUSAL_LM")


def sft_config(d: DistillSettings, out_dir: Path, seed: int, has_val: bool, sequential: bool = False):
    from trl import SFTConfig

    eval_every = d.eval_steps if has_val else None
    # transformers renamed gradient_checkpointing to activation_checkpointing (5.2x); GPU hosts may have either
    fields = {f.name for f in dataclasses.fields(SFTConfig)}
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    extra = {"train_sampling_strategy": "sequential"} if sequential else {}  # else shuffled by data_seed
    if d.gradient_checkpointing and d.checkpoint_every != 1:  # transformers >= 5.2x: only every n-th layer recomputed
        extra[f"{checkpointing}_kwargs"] = {"every_n_layers": d.checkpoint_every}
    return SFTConfig(
        **{checkpointing: d.gradient_checkpointing}, **extra,
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
        prediction_loss_only=d.share_prefix,  # a shared-prefix batch's validation returns its loss only
    )


def _liger_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("liger_kernel") is not None


def labelled_loss_trainer():
    """trl's ``SFTTrainer`` with the loss computed from the logits of the labelled positions only.

    Only the assistant tokens (~10% of a trajectory) carry labels, yet trl's fused LM head projects every position
    onto the whole vocabulary on a CPU (its compact path needs Triton), and its metrics add entropy and accuracy over
    all of them. Here the model returns the logits where the next token is labelled (``logits_to_keep``), and the
    loss is transformers' causal-LM cross entropy on those: the same value, a tenth of the LM-head work.

    A batch made by ``shared_prefix_collator`` (``distill.share_prefix``) runs the prefix its samples share once
    (``shared_prefix_pass``): the same loss and gradients as the batch run whole.
    """
    import torch
    import torch.nn.functional as F
    from trl import SFTTrainer

    from ark.distill.sft import IGNORE

    class LabelledLossTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if self.aux_loss_enabled:  # MoE router loss: trl's own path
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if "prefix_ids" in inputs:  # validation of a shared-prefix batch (its training: training_step)
                loss = self.shared_prefix_pass(model, inputs, num_items_in_batch, backward=False)
                return (loss, {}) if return_outputs else loss
            labels = inputs["labels"]
            # positions p predicting a labelled token p + 1 in any row of the batch
            keep = (labels[:, 1:] != IGNORE).any(0).nonzero().flatten()
            outputs = model(**{k: v for k, v in inputs.items() if k != "labels"}, use_cache=False,
                            logits_to_keep=keep)
            logits, targets = outputs.logits.float(), labels[:, keep + 1]
            mask = targets != IGNORE
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum")
            loss = loss / self.loss_norm(mask.sum().clamp(min=1), num_items_in_batch)
            # the curve's num_tokens: every input token (padding-free: one row), as trl counts
            seen = inputs["attention_mask"].sum() if "attention_mask" in inputs else torch.tensor(labels.numel())
            self.note_metrics(*self.token_stats(logits[mask], targets[mask]), seen.to(labels.device))
            return (loss, outputs) if return_outputs else loss

        def loss_norm(self, labelled, num_items_in_batch):
            """What the summed loss is divided by (trl's: the batch's labelled tokens, or the accumulated ones)."""
            if num_items_in_batch is None:
                return labelled
            if self.args.average_tokens_across_devices:  # as trl: DDP averages
                return num_items_in_batch / (self.accelerator.num_processes // self.get_tp_size())
            return num_items_in_batch

        @staticmethod
        def token_stats(logits, targets):
            """(summed entropy, correct predictions, labelled tokens) of the labelled positions."""
            with torch.no_grad():
                logp = logits.log_softmax(-1)
                return -(logp.exp() * logp).sum(), (logp.argmax(-1) == targets).sum(), torch.tensor(len(targets))

        def note_metrics(self, entropy, correct, n, seen):
            """trl's metrics, averaged over the labelled tokens as trl does."""
            mode = "train" if self.model.training else "eval"
            gather = lambda x: self.accelerator.gather_for_metrics(x.to(self.args.device)).sum()  # noqa: E731
            n = gather(n).clamp(min=1)
            self._metrics[mode]["entropy"].append((gather(entropy) / n).item())
            self._metrics[mode]["mean_token_accuracy"].append((gather(correct) / n).item())
            if mode == "train":
                self._total_train_tokens += gather(seen).item() // self._tp_size
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]

        def training_step(self, model, inputs, num_items_in_batch=None):
            if "prefix_ids" not in inputs:
                return super().training_step(model, inputs, num_items_in_batch)
            model.train()
            if callable(getattr(self.optimizer, "train", None)):
                self.optimizer.train()
            return self.shared_prefix_pass(model, self._prepare_inputs(inputs), num_items_in_batch, backward=True)

        def shared_prefix_pass(self, model, inputs, num_items_in_batch, backward: bool):
            """The loss of a shared-prefix batch: the prefix runs once and each suffix on its keys and values in turn.
            With ``backward`` each suffix's gradient is taken at once (one suffix's activations alive at a time, as
            in a batch of one), the prefix keys' and values' gradients summed over the suffixes, and the prefix's
            own gradient taken last from that sum: the gradient of the whole batch's loss."""
            from transformers import DynamicCache

            prefix, suffixes = inputs["prefix_ids"], inputs["suffixes"]
            labelled = sum(int((labels[:, 1:] != IGNORE).sum()) for _, labels in suffixes)
            norm = self.loss_norm(max(labelled, 1), num_items_in_batch)
            if backward and not (num_items_in_batch is not None and self.model_accepts_loss_kwargs):
                norm = norm * self.current_gradient_accumulation_steps  # as Trainer.training_step scales
            cut = prefix.shape[1]
            kv, leaves = [], []
            if cut:
                with self.compute_loss_context_manager():
                    cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
                kv = [t for layer in cache.layers for t in (layer.keys, layer.values)]
                leaves = [t.detach().requires_grad_(backward) for t in kv]
            total = torch.zeros((), device=prefix.device)
            stats = [torch.zeros((), device=prefix.device) for _ in range(3)]
            for ids, labels in suffixes:
                keep = (labels[0, 1:] != IGNORE).nonzero().flatten()
                if not len(keep):
                    continue
                past = DynamicCache(ddp_cache_data=list(zip(leaves[0::2], leaves[1::2]))) if cut else None
                positions = torch.arange(cut, cut + ids.shape[1], device=ids.device)[None]
                with self.compute_loss_context_manager():
                    logits = model(input_ids=ids, position_ids=positions, past_key_values=past, use_cache=bool(cut),
                                   logits_to_keep=keep).logits.float()[0]
                targets = labels[0, keep + 1]
                loss = F.cross_entropy(logits, targets, reduction="sum") / norm
                if backward:
                    self.accelerator.backward(loss)
                total += loss.detach()
                stats = [a + b for a, b in zip(stats, self.token_stats(logits.detach(), targets))]
            if backward and cut:
                torch.autograd.backward(kv, [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
                                             for leaf in leaves])
            seen = torch.tensor(cut * len(suffixes) + sum(ids.shape[1] for ids, _ in suffixes))
            self.note_metrics(*stats, seen)
            return total

    return LabelledLossTrainer


def shared_prefix_collator(features: list[dict]) -> dict:
    """A batch of tokenized samples as their shared prefix and the suffixes after it (``ark.distill.sft.shared_prefix``),
    plus the suffixes' labels padded into one tensor for the trainer's count of labelled tokens."""
    import torch

    from ark.distill.sft import IGNORE, shared_prefix

    group = shared_prefix(features)
    tensor = lambda xs: torch.tensor([xs], dtype=torch.long)  # noqa: E731
    suffixes = [(tensor(s["input_ids"]), tensor(s["labels"])) for s in group["suffixes"]]
    width = max(len(s["labels"]) for s in group["suffixes"])
    labels = torch.tensor([s["labels"] + [IGNORE] * (width - len(s["labels"])) for s in group["suffixes"]])
    return {"prefix_ids": tensor(group["prefix_ids"]), "suffixes": suffixes, "labels": labels}


def is_timing(key: str) -> bool:
    """A timing entry of the trainer's log history (train_runtime, eval_samples_per_second, ...): kept out of
    curve.json, which sits in the adapter directory whose content is the student's identity (a retraining with the
    same data and seed must not rename the student)."""
    return key.endswith(("_runtime", "_per_second"))


def training_report(loss, steps: int, evals: list, train: list[dict], val: list[dict], rows: int, seconds: float,
                    dtype: str) -> dict:
    """What a model card and report.json say about one adapter's training; the time it took under ``"timings"``,
    which the distill stage moves out of the adapter directory."""
    return {"train_loss": round(float(loss), 4) if loss is not None else None, "steps": steps,
            "best_eval_loss": round(min(evals), 4) if evals else None, "train_samples": len(train),
            "val_samples": len(val), "train_tokens": sum(len(s["input_ids"]) for s in train), "train_rows": rows,
            "dtype": dtype, "timings": {"train_seconds": seconds}}


def snapshot_saver(snapshots: dict[Path, int], tokenizer, start: float, taken: dict):
    """A trainer callback that saves the adapter (and tokenizer) to each snapshot directory after its number of
    updates, and notes in ``taken`` (directory -> seconds since ``start``) when it did."""
    from transformers import TrainerCallback

    class SnapshotSaver(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            for directory, steps in snapshots.items():
                if state.global_step == steps:
                    model.save_pretrained(str(directory))
                    tokenizer.save_pretrained(str(directory))
                    taken[directory] = round(time.perf_counter() - start, 1)

    return SnapshotSaver()


def trainer(model, tokenizer, train: list[dict], val: list[dict], d: DistillSettings, out_dir: Path, seed: int = 0,
            sequential: bool = False):
    """The trainer of ``train_lora`` on tokenized samples (packed into rows with ``d.pack``). With ``d.liger``
    (the GPU recipes) trl's own loss, whose Triton LM head already scores the labelled positions only.
    ``sequential``: the samples in the order given (else shuffled)."""
    from datasets import Dataset
    from trl import SFTTrainer

    from ark.distill.sft import pack

    columns = ("input_ids", "labels")
    if d.pack:  # trajectories end to end in rows of max_tokens; attention stays within each (packed_sdpa)
        train, val = pack(train, d.max_tokens), pack(val, d.max_tokens)
        columns += ("seq_lengths",)
    to_dataset = lambda rows: Dataset.from_list([{c: r[c] for c in columns} for r in rows])  # noqa: E731
    cls = SFTTrainer if d.liger else labelled_loss_trainer()
    return cls(model=model, args=sft_config(d, out_dir, seed, bool(val), sequential), train_dataset=to_dataset(train),
               eval_dataset=to_dataset(val) if val else None, processing_class=tokenizer,
               peft_config=lora_config(d.lora), data_collator=shared_prefix_collator if d.share_prefix else None)


def train_lora(model, tokenizer, train: list[dict], val: list[dict], d: DistillSettings, out_dir: str | Path, seed: int = 0,
               snapshots: dict[Path, int] | None = None) -> dict:
    """Train a LoRA adapter on ``model``; save it (and its tokenizer) to ``out_dir``; return the training curve
    and the best validation loss. ``snapshots`` (directory -> n): also the adapter after its first n updates, one
    sample each, in the order of ``train`` (no shuffling then), with its own report under ``"snapshots"``."""
    out_dir = Path(out_dir)
    t = trainer(model, tokenizer, train, val, d, out_dir, seed, sequential=bool(snapshots))
    taken: dict = {}
    if snapshots:
        t.add_callback(snapshot_saver(snapshots, tokenizer, time.perf_counter(), taken))
    result = t.train()
    t.save_model(str(out_dir))  # the adapter (the best checkpoint when validating)
    # the directory keeps the model and its card only: the trainer's checkpoints and pickled arguments carry
    # times and paths, and the directory's content is the student's identity
    shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    (out_dir / "training_args.bin").unlink(missing_ok=True)
    curve = [{k: v for k, v in row.items() if not is_timing(k)} for row in t.state.log_history]
    (out_dir / "curve.json").write_text(json.dumps(curve, indent=1))
    evals = [row["eval_loss"] for row in curve if "eval_loss" in row]
    dtype = str(model.dtype).removeprefix("torch.")
    report = training_report(result.training_loss, int(result.global_step), evals, train, val,
                             len(t.train_dataset), round(float(result.metrics.get("train_runtime", 0.0)), 1), dtype)
    if snapshots:
        report["snapshots"] = {}
        for directory, n in snapshots.items():
            if directory not in taken:
                raise RuntimeError(f"training stopped after {result.global_step} updates, before the snapshot "
                                   f"of {n} ({directory})")
            part = [row for row in curve if row["step"] <= n]
            (Path(directory) / "curve.json").write_text(json.dumps(part, indent=1))
            losses = [row["loss"] for row in part if "loss" in row]
            report["snapshots"][str(directory)] = training_report(
                sum(losses) / len(losses) if losses else None, n, [], train[:n], [], n, taken[directory], dtype)
    return report
