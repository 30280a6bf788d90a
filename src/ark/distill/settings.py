"""The distillation recipe (``distill`` config group, ``conf/distill/*.yaml``) as typed settings that check themselves:
what ``ark.stages.distill`` and ``ark.distill.train`` read, and nothing else."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ark.errors import UserError
from ark.settings import check_bool, check_int, check_number, from_mapping, is_int

NESTED_SCHEDULES = ("constant", "constant_with_warmup")  # a learning rate that does not depend on the number of updates


@dataclass(frozen=True)
class LoraSettings:
    """The adapter's shape (``distill.lora``)."""

    r: int
    alpha: float
    dropout: float
    target_modules: str | list

    def __post_init__(self):
        check_int("distill.lora.r", self.r)
        check_number("distill.lora.alpha", self.alpha, above=True)
        check_number("distill.lora.dropout", self.dropout, most=0.99)
        ok = isinstance(self.target_modules, str) or (isinstance(self.target_modules, list) and self.target_modules
                                                       and all(isinstance(m, str) for m in self.target_modules))
        if not ok:
            raise UserError(f"distill.lora.target_modules must be a module name pattern (all-linear) or a list of "
                            f"names, got {self.target_modules!r}")


@dataclass(frozen=True)
class DistillSettings:
    """A LoRA recipe and where its teacher and student are (``distill``)."""

    name: str
    device: str
    epochs: float
    max_steps: int | None
    learning_rate: float
    scheduler: str
    warmup: float  # warm-up steps (< 1: a fraction of all steps)
    batch_size: int
    grad_accum: int
    gradient_checkpointing: bool
    checkpoint_every: int
    bf16: bool
    liger: bool
    max_tokens: int
    pack: bool
    attn: str
    logging_steps: int
    eval_steps: int
    val_fraction: float
    distinct: bool  # a query's trajectories that render to the same tokens: one sample, not several
    share_prefix: bool  # a batch's common prefix (system prompt, tool list) computed once an update
    lora: LoraSettings
    teacher: str | list | None
    budgets: dict | None
    out: str
    publish: str | None
    dtype: str
    base_model: str | None

    def __post_init__(self):
        if not isinstance(self.device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise UserError(f"distill.device must be cpu, cuda or cuda:<n>, got {self.device!r}")
        check_number("distill.epochs", self.epochs, above=True)
        check_int("distill.max_steps", self.max_steps, none=True)
        check_number("distill.learning_rate", self.learning_rate, above=True)
        check_number("distill.warmup", self.warmup)
        for key in ("batch_size", "grad_accum", "checkpoint_every", "max_tokens", "logging_steps", "eval_steps"):
            check_int(f"distill.{key}", getattr(self, key))
        for key in ("gradient_checkpointing", "bf16", "liger", "pack", "distinct", "share_prefix"):
            check_bool(f"distill.{key}", getattr(self, key))
        if self.share_prefix and (self.pack or self.liger or self.attn != "prefix_sdpa"):
            raise UserError(f"distill.share_prefix runs a batch of whole trajectories on a shared prefix: it needs "
                            f"pack false, liger false and attn prefix_sdpa (got {self.pack}, {self.liger}, {self.attn})")
        check_number("distill.val_fraction", self.val_fraction, most=0.5)
        teachers = [self.teacher] if isinstance(self.teacher, str) else self.teacher
        if teachers is not None and not (isinstance(teachers, list) and all(isinstance(t, str) for t in teachers)):
            raise UserError(f"distill.teacher must be a run directory or run root, or a list of them, "
                            f"got {self.teacher!r}")
        if self.budgets:
            self.check_nested()
        if self.publish:
            self.check_publish()

    @property
    def teachers(self) -> list[str]:
        """The teacher runs (a run directory or a run root each); one clear error where none is named."""
        if not self.teacher:
            raise UserError("distill.teacher must name the teacher's run (a run directory or a run root), or a list")
        return [self.teacher] if isinstance(self.teacher, str) else list(self.teacher)

    def check_publish(self) -> None:
        """The published copies (``publish``, and each budget's beside it) must be apart from each other and from the
        trained directories (``out``, and each budget's beside it): a copy onto itself fails after the whole training,
        and one copy onto another replaces a student's files with another's."""
        names = list(self.budgets or {})
        trained = [Path(self.out)] + [Path(self.out).parent / n for n in names]
        published = [Path(self.publish)] + [Path(self.publish).parent / n for n in names]
        for kind, paths in (("trained", trained), ("published", published)):
            real = [os.path.realpath(p) for p in paths]
            if len(set(real)) < len(real):
                raise UserError(f"distill.budgets {names}: two {kind} students would share a directory (a budget "
                                f"named like distill.out's or distill.publish's last part); rename the budget")
        same = [str(p) for p in published if os.path.realpath(p) in {os.path.realpath(t) for t in trained}]
        if same:
            raise UserError(f"distill.publish {self.publish}: the published copy {same[0]} would be a directory the "
                            f"training writes (distill.out {self.out} and its budgets beside it); publish elsewhere")

    def check_nested(self) -> None:
        """Budgets need updates that a later sample cannot change: one sample an update, no held-out split, a learning
        rate that does not depend on the number of updates, and every update run."""
        if not isinstance(self.budgets, dict):
            raise UserError(f"distill.budgets must be a mapping {{name: k}}, got {self.budgets!r}")
        problems = [f"{key} {value}" for key, value, ok in (
            ("scheduler", self.scheduler, self.scheduler in NESTED_SCHEDULES),
            ("warmup", self.warmup, self.warmup == 0 or (self.warmup >= 1 and float(self.warmup).is_integer())),
            ("val_fraction", self.val_fraction, not self.val_fraction),
            ("batch_size", self.batch_size, self.batch_size == 1), ("grad_accum", self.grad_accum,
                                                                   self.grad_accum == 1),
            ("pack", self.pack, not self.pack), ("max_steps", self.max_steps, not self.max_steps),
            ("epochs", self.epochs, self.epochs == 1)) if not ok]
        if problems:
            raise UserError(f"distill.budgets needs a constant schedule (warm-up in whole steps), val_fraction 0, "
                            f"batch_size 1, grad_accum 1, no packing, one epoch and no max_steps; got "
                            f"{', '.join(problems)}")
        for name, k in self.budgets.items():
            if not is_int(k) or k < 1 or "/" in str(name):
                raise UserError(f"distill.budgets: {name}: {k} (a directory name: a whole number of queries >= 1)")


def distill_settings(config: dict) -> DistillSettings:
    """The typed recipe of a resolved ``distill`` group (plain data)."""
    return from_mapping(DistillSettings, "distill", {
        **config, "lora": from_mapping(LoraSettings, "distill.lora", config.get("lora") or {})})
