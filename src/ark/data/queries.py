"""Query sets on disk: ``<queries_dir>/{train,val,test}.jsonl`` of ``{id, query, answer_ids[, meta]}``."""
from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

from ark.errors import UserError
from ark.io import read_jsonl, write_json, write_jsonl
from ark.settings import check_int, is_number

SPLITS = ("train", "val", "test")
ALL = "all"  # every query of the set: its splits one after another (the every-case sensitivity table)


def split_of(key: str, fractions=(0.6, 0.2, 0.2)) -> str:
    """train/val/test for a key: sha1 of the key mapped to [0, 1) and cut at the cumulative fractions."""
    u = int.from_bytes(hashlib.sha1(key.encode("utf-8")).digest()[:8], "big") / 2**64
    total = sum(fractions)
    cut_train, cut_val = fractions[0] / total, (fractions[0] + fractions[1]) / total
    return "train" if u < cut_train else "val" if u < cut_val else "test"


def require_int(name: str, value, least: int = 0, optional: bool = False) -> None:
    """A query-set setting that must be an integer >= ``least`` (or null where ``optional``)."""
    check_int(name, value, least, none=optional)


def require_fractions(name: str, value) -> None:
    """Three train/val/test weights: numbers >= 0 with a positive sum."""
    ok = (not isinstance(value, (str, bytes)) and hasattr(value, "__len__") and len(value) == 3
          and all(is_number(v) and v >= 0 for v in value) and sum(value) > 0)
    if not ok:
        raise UserError(f"{name} must be three numbers >= 0 (train, val, test) with a positive sum, got {value!r}")


def write_query_splits(splits: dict[str, list[dict]], out_dir: str | Path, stats: dict | None = None) -> dict:
    """Write one JSON Lines file per split (atomically; extra splits such as STaRK's ``test-0.1`` too) and
    ``stats.json``; returns the counts."""
    out_dir = Path(out_dir)
    names = list(SPLITS) + [s for s in splits if s not in SPLITS]
    counts = {s: write_jsonl(out_dir / f"{s}.jsonl", splits.get(s, [])) for s in names}
    write_json(out_dir / "stats.json", {"queries": counts, **(stats or {})})
    return counts


def parse_split(split: str) -> tuple[str, float | str | None]:
    """``test`` -> (test, None); ``test-0.1`` -> (test, 0.1): a seeded subset of that fraction; ``test-spread`` ->
    (test, "spread"): every query of test, in a seeded order spread across publications (``spread``). ``all``:
    train, val and test together."""
    m = re.fullmatch(r"(train|val|test|all)(?:-(0?\.\d+|spread))?", str(split))
    if m is None:
        raise UserError(f"unknown split {split!r}; expected one of {', '.join((*SPLITS, ALL))}, optionally with a "
                        "fraction for a subset (test-0.1) or -spread for a publication-spread order (test-spread)")
    selection = m.group(2)
    return m.group(1), selection if selection in (None, "spread") else float(selection)


def _hashed(seed: int, key: str) -> bytes:
    return hashlib.sha1(f"{seed}:{key}".encode()).digest()


def subset(rows: list[dict], fraction: float, seed: int = 0) -> list[dict]:
    """A seeded ``fraction`` of the rows (at least one), in their original order: the ``ceil(fraction * n)``
    rows whose ids hash lowest under the seed, so a subset never depends on the order of the file."""
    n = max(1, math.ceil(fraction * len(rows)))
    keep = set(sorted(range(len(rows)), key=lambda i: _hashed(seed, rows[i]["id"]))[:n])
    return [r for i, r in enumerate(rows) if i in keep]


def publication_of(query: dict) -> str:
    """The publication a case report comes from (``meta.pmid``); any other query is its own."""
    return str((query.get("meta") or {}).get("pmid") or query["id"])


def spread(rows: list[dict], seed: int = 0) -> list[dict]:
    """Every row, ordered so that each publication gives one case before any gives a second: the publications in a
    seeded order, each one's cases in a seeded order (by hashed ids, never the file's order). The first n of it are
    a sample of as many publications as n allows, so an interval that resamples publications has as many units as
    it can."""
    by_publication: dict[str, list[dict]] = {}
    for r in rows:
        by_publication.setdefault(publication_of(r), []).append(r)
    groups = [sorted(g, key=lambda r: _hashed(seed, r["id"]))
              for _, g in sorted(by_publication.items(), key=lambda kv: _hashed(seed, kv[0]))]
    depth = max((len(g) for g in groups), default=0)
    return [g[i] for i in range(depth) for g in groups if i < len(g)]


def load_queries(queries_dir: str | Path, split: str, seed: int = 0) -> list[dict]:
    """The rows of ``split``: a file ``<split>.jsonl`` when the query set ships one (STaRK's ``test-0.1``),
    otherwise for ``<base>-<fraction>`` a seeded subset of ``<base>.jsonl``, for ``<base>-spread`` all of it in
    its seeded publication-spread order, and for ``all`` the splits' files one after another."""
    base, selection = parse_split(split)
    path = Path(queries_dir) / f"{split}.jsonl"
    if split == ALL and not path.exists():
        return [row for s in SPLITS for row in load_queries(queries_dir, s)]
    if not path.exists() and selection == "spread":
        return spread(load_queries(queries_dir, base), seed)
    if not path.exists() and selection is not None:
        return subset(load_queries(queries_dir, base), selection, seed)
    if not path.exists():
        raise UserError(f"no query file {path} (run the make_queries stage)")
    if not path.is_file():
        raise UserError(f"the query file {path} is not a regular file (a directory, FIFO or device)")
    try:
        rows = read_jsonl(path)
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text ({e.reason}); damaged file?") from None
    for i, q in enumerate(rows, 1):  # every row, before a subset hashes ids or a limit cuts the list
        if not isinstance(q, dict) or not isinstance(q.get("id"), str) or not q["id"]:
            raise UserError(f"{path} row {i}: expected a JSON object with a non-empty string 'id', got "
                            f"{brief(q)}")
        if q.get("meta") is not None and not isinstance(q["meta"], dict):
            raise UserError(f"{path} row {i}: 'meta' must be a JSON object, got {brief(q['meta'])}")
    return rows


def brief(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
