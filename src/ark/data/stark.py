"""STaRK question sets: ``stark_qa/stark_qa.csv`` + ``split/<split>.index`` and the human-generated set.

A query is a plain dict ``{"id": str, "query": str, "answer_ids": [int, ...]}``; answer ids are STaRK
node ids, deduplicated in order (PRIME has lists with repeats, e.g. query 10049). Splits keep the order
of their ``.index`` file, as STaRK's ``get_idx_split`` does.

Layout of one dataset folder (HF ``qa/<name>/``, downloaded into ``<raw_dir>/<name>/`` beside the SKB's
``processed/``, as STaRK's own ``load_qa(name, root)`` lays it out)::

    stark_qa/stark_qa.csv                      id,query,answer_ids
    stark_qa/stark_qa_human_generated_eval.csv id,query,answer_ids,answer_ids_source
    split/{train,val,test,test-0.1}.index      newline-separated query ids
"""
from __future__ import annotations

import ast
import csv
from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

from ark.data import Dataset, QuerySet
from ark.errors import UserError
from ark.data.queries import SPLITS
from ark.settings import is_int

QA_FILE = "stark_qa/stark_qa.csv"
HUMAN_FILE = "stark_qa/stark_qa_human_generated_eval.csv"
FOLDER_NAMES = {"amazon": ("amazon",), "mag": ("mag",), "prime": ("prime", "primekg")}


def stark_qa_dir(root: str | Path, name: str) -> Path:
    """The QA folder of SKB ``name`` under ``root`` (PRIME may be called ``prime`` or ``primekg``)."""
    key = name.lower().removeprefix("stark_")
    key = "prime" if key == "primekg" else key
    if key not in FOLDER_NAMES:
        raise UserError(f"unknown STaRK dataset {name!r}; valid: {', '.join(FOLDER_NAMES)}")
    folders = [Path(root) / f for f in FOLDER_NAMES[key]]
    return next((f for f in folders if f.exists()), folders[0])


def _require(path: Path) -> Path:
    if not path.exists():
        raise UserError(f"STaRK QA file {path} is missing")
    return path


def read_qa_csv(path: str | Path) -> list[dict]:
    """Rows of a STaRK QA CSV as query dicts, in file order."""
    path = _require(Path(path))
    queries = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in ("id", "query", "answer_ids") if c not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"{path}: no column {', '.join(missing)} (header: {reader.fieldnames}); expected "
                                "id,query,answer_ids")
            seen = set()
            for row in reader:
                queries.append(_qa_row(row, f"{path}:{reader.line_num}"))
                if queries[-1]["id"] in seen:  # a split's id would name two questions
                    raise UserError(f"{path}:{reader.line_num}: duplicate query id {queries[-1]['id']}")
                seen.add(queries[-1]["id"])
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text ({e.reason})") from None
    except csv.Error as e:
        raise UserError(f"{path}: not a valid CSV file ({e})") from None
    return queries


def _qa_row(row: dict, where: str) -> dict:
    try:
        answers = ast.literal_eval(row["answer_ids"] or "")
        if not isinstance(answers, (list, tuple)) or not all(is_int(a) for a in answers):
            raise ValueError
        qid = str(int(row["id"]))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise UserError(f"{where}: expected an integer id and answer_ids as a list of integers such as [12, 34], "
                        f"got id {row['id']!r}, answer_ids {str(row['answer_ids'])[:60]!r}") from None
    if not isinstance(row["query"], str) or not row["query"].strip():
        raise UserError(f"{where}: empty query text")
    return {"id": qid, "query": row["query"], "answer_ids": list(dict.fromkeys(int(a) for a in answers))}


def read_split_ids(path: str | Path) -> list[str]:
    """Query ids of one ``.index`` file, in file order."""
    path = _require(Path(path))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text ({e.reason})") from None
    ids = []
    for token in text.split():
        try:
            ids.append(str(int(token)))
        except ValueError:
            raise UserError(f"{path}: {token[:40]!r} is not a query id (one integer per line)") from None
    return ids


OPTIONAL_SPLITS = ("test-0.1",)  # STaRK's own 10% test subset, used where the release has it


def load_stark_splits(qa_dir: str | Path, splits=SPLITS) -> dict[str, list[dict]]:
    """``{split: [query, ...]}`` for the synthesized queries of one dataset folder."""
    qa_dir = Path(qa_dir)
    by_id = {q["id"]: q for q in read_qa_csv(qa_dir / QA_FILE)}
    result = {}
    optional = [s for s in OPTIONAL_SPLITS if (qa_dir / "split" / f"{s}.index").exists()]
    for split in list(splits) + optional:
        index = qa_dir / "split" / f"{split}.index"
        ids = read_split_ids(index)
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise UserError(f"{index} lists {len(unknown)} ids not in {QA_FILE}, e.g. {unknown[0]}")
        result[split] = [by_id[i] for i in ids]
    return result


def load_stark_human_eval(qa_dir: str | Path) -> list[dict]:
    """The human-generated evaluation queries (``answer_ids_source`` is not kept)."""
    return read_qa_csv(Path(qa_dir) / HUMAN_FILE)


@dataclass(kw_only=True)
class Stark(Dataset):
    """A STaRK semi-structured knowledge base (``skb``: amazon, mag, prime), read from its HF files in ``raw_dir``
    (downloaded at ``revision`` only when absent and ``online``); with ``generate`` set, a graph of its shape made up
    by ``ark.data.synthetic_skb`` and written in the same files, with its questions.

    ``qa_files``: the question files, ``{path under qa/<skb>/: sha256 or null}``, fetched into ``raw_dir/<skb>/<path>``
    (from ``<mirror>/<qa_mirror_path>/<path>`` when a mirror is set), each checked against its sha256."""

    kind: ClassVar[str] = "stark"

    skb: str
    documents: dict
    online: bool = False
    revision: str | None = None
    qa_files: dict | None = None
    qa_mirror_path: str | None = None
    generate: dict | None = None

    def download(self, mirror: str | None = None) -> dict[str, str]:
        from ark.graph.stark import ensure_stark_files

        if not self.generate:
            questions = self.fetch_questions(mirror)
            return {self.skb: str(ensure_stark_files(self.skb, self.raw_dir, revision=self.revision,
                                                     online=self.online)), **questions}
        from ark.data.synthetic_skb import QA_DIR, SETTINGS, generate_skb

        unknown = sorted(set(self.generate) - set(SETTINGS))
        if unknown:
            raise UserError(f"dataset.generate has no setting {', '.join(unknown)}; valid: {', '.join(SETTINGS)}")
        generate_skb(self.skb, self.raw_dir, **self.generate)
        return {self.skb: str(ensure_stark_files(self.skb, self.raw_dir)), "qa": f"{self.raw_dir}/{QA_DIR}"}

    def fetch_questions(self, mirror: str | None = None) -> dict[str, str]:
        """The ``qa_files`` in ``raw_dir/<skb>/``: {"qa/<skb>/<path>": local path}."""
        from ark.fetch import fetch_pinned

        fetched = {}
        for path, sha256 in (self.qa_files or {}).items():
            fetched[f"qa/{self.skb}/{path}"] = str(fetch_pinned(
                Path(self.raw_dir) / self.skb / path, url=qa_url(self.skb, self.revision, path), sha256=sha256,
                online=self.online, mirror=mirror,
                mirror_path=f"{self.qa_mirror_path}/{path}" if self.qa_mirror_path else None,
                setting="dataset.online=true"))
        return fetched

    def build_graph(self):
        from ark.graph.stark import ensure_stark_files, load_stark_skb

        ensure_stark_files(self.skb, self.raw_dir, revision=self.revision, online=self.online and not self.generate)
        graph = load_stark_skb(self.skb, self.raw_dir, relations=self.documents["relations"])
        if self.generate:
            graph.meta.update(dataset=self.name, source="ark.data.synthetic_skb", generate=self.generate)
        return graph


def qa_url(skb: str, revision: str | None, path: str) -> str:
    """The URL of the question file ``qa/<skb>/<path>`` of the HF dataset at ``revision``."""
    from ark.fetch import hf_url
    from ark.graph.stark import STARK_REPO

    return hf_url(STARK_REPO, revision or "<stark_revision>", f"qa/{skb}/{path}")


@dataclass(kw_only=True)
class StarkQueries(QuerySet):
    """STaRK's QA files under ``qa_dir`` (``human``: its human-written test questions only)."""

    kind: ClassVar[str] = "stark"

    qa_dir: str
    human: bool = False

    def make(self, dataset) -> tuple[dict[str, list[dict]], dict]:
        if dataset.get("generate") and self.name != "generated":
            raise UserError(f"dataset {dataset.name} is generated: its questions are queries=generated")
        needed = [HUMAN_FILE] if self.human else [QA_FILE] + [f"split/{s}.index" for s in SPLITS]
        for path in needed:
            if not (Path(self.qa_dir) / path).exists():
                raise UserError(self.missing(path, dataset))
        if self.human:
            return {"test": load_stark_human_eval(self.qa_dir)}, {}
        return load_stark_splits(self.qa_dir), {}

    def missing(self, path: str, dataset) -> str:
        """What to say about a missing question file: where the download stage puts it, also its URL and the
        settings that fetch it."""
        local = Path(self.qa_dir) / path
        downloaded_here = Path(self.qa_dir) == Path(dataset.raw_dir) / str(dataset.skb)
        if dataset.get("generate") or not dataset.get("qa_files") or not downloaded_here:
            return f"STaRK QA file {local} is missing"
        return (f"STaRK QA file {local} is missing; the download stage fetches it from "
                f"{qa_url(dataset.skb, dataset.get('revision'), path)}: python -m ark.stages.download "
                f"dataset={dataset.name} dataset.online=true (or ARK_MIRROR=<a copy> instead of the network)")
