"""Relevance functions over node documents: BM25 (bm25s) and dense (MiniLM embeddings).

Both expose the same two calls the tools use:
``search(query, k) -> (ids, scores)`` over all nodes, best first, and
``score(query, ids) -> scores`` for a sorted array of node ids (a neighborhood).
"""
from __future__ import annotations

from pathlib import Path
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ark.errors import UserError


class Relevance(Protocol):
    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def score(self, query: str, ids: np.ndarray) -> np.ndarray: ...


RUNTIME_PARAMS = ("device", "batch_size")  # how fast an index is built, not what it holds


def index_settings(retriever_cfg) -> dict:
    """The retriever settings an index is built with (stored in its ``info.json``; part of a run's identity)."""
    from omegaconf import OmegaConf

    params = OmegaConf.to_container(retriever_cfg.params, resolve=True) if retriever_cfg.get("params") else {}
    if "bf16" in params:  # "auto" resolved for this machine: an index computed in bf16 is another index
        from ark.index.dense import resolve_bf16

        params["bf16"] = resolve_bf16(params["bf16"])
    return {"name": retriever_cfg.name, "params": {k: v for k, v in params.items() if k not in RUNTIME_PARAMS}}


@dataclass(kw_only=True)
class Retriever:
    """A ``conf/retriever/<name>.yaml``: its index class (``_target_`` names the subclass) and the parameters an
    index is built with. Adding a retriever: an index class with ``build(docs, **params)``, ``save`` and ``load``,
    a subclass returning it from ``index_class``, and one YAML."""

    name: str
    params: dict = field(default_factory=dict)

    @property
    def index_class(self) -> type:
        raise NotImplementedError

    def build(self, docs):
        return self.index_class.build(docs, **self.params)

    def load(self, directory: str | Path) -> Relevance:
        """The index in ``directory``; a damaged file is one clear error naming the directory."""
        try:
            return self.index_class.load(directory)
        except (OSError, ValueError, KeyError, TypeError, EOFError) as e:  # json's, numpy's and scipy's errors
            why = " ".join(str(e).split())[:300]
            raise UserError(f"damaged {self.name} index at {directory} ({type(e).__name__}: {why}); rebuild it "
                            "(build_index)") from None


class BM25Retriever(Retriever):
    @property
    def index_class(self) -> type:
        from ark.index.bm25 import BM25Index

        return BM25Index


class DenseRetriever(Retriever):
    @property
    def index_class(self) -> type:
        from ark.index.dense import DenseIndex

        return DenseIndex
