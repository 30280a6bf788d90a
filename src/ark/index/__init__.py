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
from ark.settings import is_number


class Relevance(Protocol):
    name: str  # the relevance function, as the agent's tool text names it

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def score(self, query: str, ids: np.ndarray) -> np.ndarray: ...


RUNTIME_PARAMS = ("device", "batch_size", "reuse")  # how fast an index is built, not what it holds


def index_settings(retriever: dict, index_dir: str | Path | None = None) -> dict:
    """The retriever settings an index is built with (stored in its ``info.json``; part of a run's identity), from
    the retriever's config as plain data (name, params).

    ``bf16: auto`` is resolved: an index computed in bf16 is another index. With ``index_dir`` (the index a run
    reads), "auto" takes what that index was built in, so an index built on another kind of CPU (or pulled) is
    used as it is and queries are encoded as it was; without one, what this CPU computes natively."""
    params = dict(retriever.get("params") or {})
    if params.get("bf16") == "auto":
        built = built_settings(index_dir) if index_dir is not None else None
        if built and "bf16" in built.get("params", {}):
            params["bf16"] = built["params"]["bf16"]
        else:
            from ark.machine import resolve_bf16

            params["bf16"] = resolve_bf16("auto")
    elif "bf16" in params:
        params["bf16"] = bool(params["bf16"])
    return {"name": retriever["name"], "params": {k: v for k, v in params.items() if k not in RUNTIME_PARAMS}}


def built_settings(index_dir: str | Path) -> dict | None:
    """The settings recorded in ``index_dir/info.json`` (None: no index there)."""
    import json

    info = Path(index_dir) / "info.json"
    if not info.exists():
        return None
    try:
        settings = json.loads(info.read_text()).get("settings")
    except (OSError, ValueError, AttributeError) as e:  # not a file, not UTF-8 JSON, not an object
        raise UserError(f"damaged index at {index_dir}: info.json ({type(e).__name__}); rebuild it "
                        "(build_index)") from None
    return settings if isinstance(settings, dict) else None


@dataclass(kw_only=True)
class Retriever:
    """A ``conf/retriever/<name>.yaml``: its index class (``_target_`` names the subclass) and the parameters an
    index is built with. Adding a retriever: an index class with ``build(docs, **params)``, ``save`` and ``load``,
    a subclass returning it from ``index_class``, and one YAML."""

    name: str
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        import inspect

        taken = inspect.signature(self.index_class.build).parameters
        unknown = sorted(set(self.params) - set(taken) - {"docs"})
        if unknown:
            raise UserError(f"retriever.params has no setting {', '.join(unknown)}; valid: "
                            f"{', '.join(k for k in taken if k != 'docs')}")

    @property
    def index_class(self) -> type:
        raise NotImplementedError

    def build(self, docs):
        return self.index_class.build(docs, **self.params)

    def load(self, directory: str | Path) -> Relevance:
        """The index in ``directory``; a damaged file is one clear error naming the directory."""
        try:
            return self.index_class.load(directory)
        except UserError:  # already one clear line (no index there)
            raise
        except (OSError, ValueError, KeyError, TypeError, EOFError) as e:  # json's, numpy's and scipy's errors
            why = " ".join(str(e).split())[:300]
            raise UserError(f"damaged {self.name} index at {directory} ({type(e).__name__}: {why}); rebuild it "
                            "(build_index)") from None


class BM25Retriever(Retriever):
    def __post_init__(self):
        super().__post_init__()
        k1, b = self.params.get("k1", 1.2), self.params.get("b", 0.75)
        if not is_number(k1) or k1 < 0:
            raise UserError(f"retriever.params.k1 must be a number >= 0, got {k1!r}")
        if not is_number(b) or not 0 <= b <= 1:
            raise UserError(f"retriever.params.b must be a number in 0..1, got {b!r}")

    @property
    def index_class(self) -> type:
        from ark.index.bm25 import BM25Index

        return BM25Index


class DenseRetriever(Retriever):
    @property
    def index_class(self) -> type:
        from ark.index.dense import DenseIndex

        return DenseIndex


