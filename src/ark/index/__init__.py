"""Relevance functions over node documents: BM25 (bm25s) and dense (MiniLM embeddings).

Both expose the same two calls the tools use:
``search(query, k) -> (ids, scores)`` over all nodes, best first, and
``score(query, ids) -> scores`` for a sorted array of node ids (a neighborhood).
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from ark.errors import UserError


class Relevance(Protocol):
    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def score(self, query: str, ids: np.ndarray) -> np.ndarray: ...


def build_relevance(kind: str, docs, params: dict):
    if kind == "bm25":
        from ark.index.bm25 import BM25Index

        return BM25Index.build(docs, **params)
    if kind == "dense":
        from ark.index.dense import DenseIndex

        return DenseIndex.build(docs, **params)
    raise UserError(f"unknown retriever {kind!r} (expected bm25 or dense)")


def load_relevance(kind: str, directory: str | Path) -> Relevance:
    if kind == "bm25":
        from ark.index.bm25 import BM25Index

        return BM25Index.load(directory)
    if kind == "dense":
        from ark.index.dense import DenseIndex

        return DenseIndex.load(directory)
    raise UserError(f"unknown retriever {kind!r} (expected bm25 or dense)")
