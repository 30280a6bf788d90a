"""Query sets on disk: ``<queries_dir>/{train,val,test}.jsonl`` of ``{id, query, answer_ids[, meta]}``."""
from __future__ import annotations

import hashlib
from pathlib import Path

from ark.errors import UserError
from ark.io import read_jsonl, write_json, write_jsonl

SPLITS = ("train", "val", "test")


def split_of(key: str, fractions=(0.6, 0.2, 0.2)) -> str:
    """train/val/test for a key: sha1 of the key mapped to [0, 1) and cut at the cumulative fractions."""
    u = int.from_bytes(hashlib.sha1(key.encode("utf-8")).digest()[:8], "big") / 2**64
    total = sum(fractions)
    cut_train, cut_val = fractions[0] / total, (fractions[0] + fractions[1]) / total
    return "train" if u < cut_train else "val" if u < cut_val else "test"


def write_query_splits(splits: dict[str, list[dict]], out_dir: str | Path, stats: dict | None = None) -> dict:
    """Write one JSON Lines file per split (atomically) and ``stats.json``; returns the counts."""
    out_dir = Path(out_dir)
    counts = {s: write_jsonl(out_dir / f"{s}.jsonl", splits.get(s, [])) for s in SPLITS}
    write_json(out_dir / "stats.json", {"queries": counts, **(stats or {})})
    return counts


def load_queries(queries_dir: str | Path, split: str) -> list[dict]:
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    path = Path(queries_dir) / f"{split}.jsonl"
    if not path.exists():
        raise UserError(f"no query file {path} (run the make_queries stage)")
    return read_jsonl(path)
