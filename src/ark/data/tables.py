"""A user's own graph from tables, with no code to write (docs/own_graph.md). One folder holds, each as CSV or
Parquet (by its extension)::

    nodes.csv      id, type, name [, text columns]   one row per node; ids are strings, each used once
    edges.csv      source, relation, target          node ids; each edge directed as written
    questions.csv  question, answer_ids [, id]       optional; answer_ids: node ids separated by ";"

Node ``i`` of the graph is row ``i`` of the node table and keeps the table's id as its ``key``, so questions name
nodes by the user's ids and answers show the user's names. The text columns of a node are its fields in its
document; its relations are rendered there too (``documents.relation_types``). The download stage checks the files
(every id known, none twice) and copies them into ``raw_dir``; ``make_queries`` (``queries=tables``) splits the
questions into train/val/test by the hash of their id (``split_fractions``).
"""
from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from typing import ClassVar
from pathlib import Path

from ark.data import HERE, Dataset, QuerySet
from ark.errors import UserError
from ark.io import atomic_dir

TABLES = {"nodes": ("id", "type", "name"), "edges": ("source", "relation", "target"),
          "questions": ("question", "answer_ids")}
SUFFIXES = (".csv", ".parquet")
ANSWER_SEPARATOR = ";"


def table_files(folder: str | Path) -> dict[str, Path]:
    """{table: its file} in ``folder``: nodes and edges required, questions where present."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such folder (expected nodes.csv and edges.csv in it)")
    found = {}
    for table in TABLES:
        paths = [folder / f"{table}{s}" for s in SUFFIXES if (folder / f"{table}{s}").is_file()]
        if len(paths) > 1:
            raise UserError(f"{folder}: both {paths[0].name} and {paths[1].name}; keep one")
        if paths:
            found[table] = paths[0]
        elif table != "questions":
            raise UserError(f"{folder}: no {table}.csv or {table}.parquet")
    return found


def _text(value) -> str:
    """A cell as a string ('' when empty); a Parquet integer id 7 is '7'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def read_table(path: Path, table: str) -> list[dict]:
    """The rows of a CSV or Parquet file (by extension), with the columns ``TABLES[table]`` required."""
    import pandas as pd

    try:
        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8", skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise UserError(f"{path}: empty file; expected a header row ({', '.join(TABLES[table])}) and rows") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text ({e.reason})") from None
    except (ValueError, OSError) as e:  # pandas' parser errors and pyarrow's are ValueErrors
        raise UserError(f"{path}: not a readable {path.suffix[1:]} file ({' '.join(str(e).split())[:200]})") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in TABLES[table] if c not in frame.columns]
    if missing:
        raise UserError(f"{path}: no column {', '.join(missing)} (columns: {', '.join(frame.columns)}); expected "
                        f"{', '.join(TABLES[table])}")
    if frame.empty:
        raise UserError(f"{path}: no rows below its header")
    return frame.to_dict("records")


def _where(path: Path, i: int) -> str:
    """Row ``i`` (0-based) as a user finds it: a CSV's line (its header is line 1), a Parquet file's row."""
    return f"{path}:{i + 2}" if path.suffix == ".csv" else f"{path} row {i + 1}"


@dataclass
class Tables:
    """The checked content of a folder of tables: nodes (in file order), edges (duplicates dropped), questions."""

    ids: list[str]
    types: list[str]
    names: list[str]
    fields: list[dict]
    edges: list[tuple[int, str, int]]
    questions: list[dict] = field(default_factory=list)  # {id, query, answers: [node ids]}

    @classmethod
    def read(cls, folder: str | Path) -> "Tables":
        files = table_files(folder)
        ids, types, names, fields, index = [], [], [], [], {}
        path = files["nodes"]
        for i, row in enumerate(read_table(path, "nodes")):
            node_id, type_name = _text(row["id"]), _text(row["type"])
            if not node_id or not type_name:
                raise UserError(f"{_where(path, i)}: empty {'id' if not node_id else 'type'}")
            if ANSWER_SEPARATOR in node_id:
                raise UserError(f"{_where(path, i)}: id {node_id!r} contains '{ANSWER_SEPARATOR}', which separates "
                                "the ids of an answer")
            if node_id in index:
                raise UserError(f"{_where(path, i)}: duplicate id {node_id!r} (first at "
                                f"{_where(path, index[node_id])})")
            index[node_id] = i
            ids.append(node_id)
            types.append(type_name)
            names.append(_text(row["name"]) or node_id)
            fields.append({k: _text(v) for k, v in row.items() if k not in TABLES["nodes"] and _text(v)})
        edges, path = {}, files["edges"]
        for i, row in enumerate(read_table(path, "edges")):
            relation = _text(row["relation"])
            if not relation:
                raise UserError(f"{_where(path, i)}: empty relation")
            ends = []
            for end in ("source", "target"):
                node_id = _text(row[end])
                if node_id not in index:
                    raise UserError(f"{_where(path, i)}: {end} {node_id!r} is not an id of {files['nodes'].name}")
                ends.append(index[node_id])
            edges.setdefault((ends[0], relation, ends[1]), None)
        tables = cls(ids, types, names, fields, list(edges))
        if "questions" in files:
            tables.questions = read_questions(files["questions"], index)
        return tables


def read_questions(path: Path, index: dict[str, int]) -> list[dict]:
    """The question table's rows as {id, query, answers}: ``answers`` the node ids, checked against ``index``."""
    questions, seen = [], {}
    for i, row in enumerate(read_table(path, "questions")):
        qid = _text(row.get("id")) or str(i + 1)
        text = _text(row["question"])
        value = row["answer_ids"]
        answers = ([_text(a) for a in value] if not isinstance(value, str) and hasattr(value, "__iter__")
                   else [a.strip() for a in _text(value).split(ANSWER_SEPARATOR)])
        answers = list(dict.fromkeys(a for a in answers if a))
        if not text:
            raise UserError(f"{_where(path, i)}: empty question")
        if not answers:
            raise UserError(f"{_where(path, i)}: no answer_ids (node ids separated by '{ANSWER_SEPARATOR}')")
        unknown = [a for a in answers if a not in index]
        if unknown:
            raise UserError(f"{_where(path, i)}: answer {unknown[0]!r} is not a node id")
        if qid in seen:
            raise UserError(f"{_where(path, i)}: duplicate question id {qid!r} (first at {_where(path, seen[qid])})")
        seen[qid] = i
        questions.append({"id": qid, "query": text, "answers": answers})
    return questions


@dataclass(kw_only=True)
class TableGraph(Dataset):
    """A graph read from node and edge tables (and its questions from a question table): ``files`` is the folder
    the download stage copies them from; ``documents.relation_types``: the node types whose documents also list
    their relations (``all``, or a list)."""

    kind: ClassVar[str] = "tables"

    documents: dict
    files: str | None = field(default=None, metadata=HERE)  # where download copies the tables from

    def download(self, mirror: str | None = None) -> dict[str, str]:
        if not self.files:
            raise UserError("dataset.files is not set: give the folder holding nodes.csv and edges.csv (and "
                            "questions.csv), e.g. dataset.files=docs/examples/own_graph")
        files = table_files(self.files)
        Tables.read(self.files)  # every file checked before anything is written
        with atomic_dir(self.raw_dir) as tmp:
            for path in files.values():
                shutil.copyfile(path, tmp / path.name)
        return {table: str(Path(self.raw_dir) / path.name) for table, path in files.items()}

    def build_graph(self):
        import numpy as np

        from ark.graph import Graph
        from ark.graph.documents import build_documents

        if not Path(self.raw_dir).is_dir():
            raise UserError(f"no tables at {self.raw_dir}: run the download stage first (dataset.files=<folder>)")
        t = Tables.read(self.raw_dir)
        node_types = list(dict.fromkeys(t.types))
        relations = list(dict.fromkeys(r for _, r, _ in t.edges))
        for setting, types in (("dataset.candidate_types", self.candidate_types),
                               ("dataset.documents.relation_types", self._relation_types(node_types))):
            unknown = [x for x in types or () if x not in node_types]
            if unknown:
                raise UserError(f"{setting}: {unknown[0]!r} is not a node type of {self.name}; its types: "
                                f"{', '.join(node_types)}")
        type_id, rel_id = {x: i for i, x in enumerate(node_types)}, {r: i for i, r in enumerate(relations)}
        graph = Graph.from_tables(
            node_type_names=node_types, relation_names=relations, node_type=[type_id[x] for x in t.types],
            key=t.ids, name=t.names, fields=t.fields, src=[s for s, _, _ in t.edges], dst=[d for _, _, d in t.edges],
            edge_rel=[rel_id[r] for _, r, _ in t.edges],
            meta={"dataset": self.name, "source": "tables", "candidate_types": self.candidate_types})
        graph.doc = np.asarray(build_documents(graph, self._relation_types(node_types),
                                               self.documents["max_per_relation"]), dtype=object)
        return graph

    def _relation_types(self, node_types: list[str]) -> list[str]:
        chosen = self.documents.get("relation_types")
        if isinstance(chosen, str):
            return list(node_types) if chosen == "all" else [chosen]
        return list(chosen or [])


@dataclass(kw_only=True)
class TableQueries(QuerySet):
    """The question table of a ``TableGraph`` (``dataset=tables``), split by the hash of each question's id."""

    kind: ClassVar[str] = "tables"

    split_fractions: list = field(default_factory=lambda: [0.6, 0.2, 0.2])

    def make(self, dataset) -> tuple[dict[str, list[dict]], dict]:
        from ark.data.queries import SPLITS, require_fractions, split_of
        from ark.graph import load_graph

        require_fractions("queries.split_fractions", self.split_fractions)
        files = table_files(dataset.raw_dir) if Path(dataset.raw_dir).is_dir() else {}
        if "questions" not in files:
            raise UserError(f"no questions.csv or questions.parquet in {dataset.raw_dir}: queries={self.name} reads "
                            "the question table of a dataset=tables graph (put it beside nodes.csv and download)")
        graph = load_graph(dataset)
        node_of = {str(k): i for i, k in enumerate(graph.key)}
        questions = read_questions(files["questions"], node_of)
        fractions = tuple(float(f) for f in self.split_fractions)
        splits = {s: [] for s in SPLITS}
        for q in questions:
            splits[split_of(q["id"], fractions)].append(
                {"id": q["id"], "query": q["query"], "answer_ids": [node_of[a] for a in q["answers"]]})
        return splits, {"split_fractions": list(fractions)}
