"""The typed graph every tool works on (DESIGN §4.1).

Nodes are integers 0..N-1 with one type each, a display name, a key (the source's own id, e.g.
``HP:0001250``), free-text fields and a document (the text the relevance functions index).
Edges are typed and directed as stored; adjacency is CSR over both directions so that a
neighborhood costs O(degree): row ``v`` lists every (neighbor, relation, direction, edge id),
sorted by neighbor id (the order the posting-list intersection in ``ark.index`` relies on).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ark.errors import UserError
from ark.io import atomic_dir, checksums, verify_checksums

OUT, IN = 1, 0  # direction of a CSR entry as seen from the row's node

_CSR_ARRAYS = ("indptr", "nbr", "rel", "out", "eid")


@dataclass
class Graph:
    node_type_names: list[str]  # type id -> name
    relation_names: list[str]  # relation id -> name
    node_type: np.ndarray  # int16 [N]
    key: np.ndarray  # object [N]
    name: np.ndarray  # object [N]
    fields: np.ndarray  # object [N], JSON strings of the node's own text fields
    doc: np.ndarray  # object [N], d_V(v)
    src: np.ndarray  # int32 [E]
    dst: np.ndarray  # int32 [E]
    edge_rel: np.ndarray  # int16 [E]
    edge_attr: np.ndarray  # object [E], '' when absent
    indptr: np.ndarray  # int64 [N+1]
    nbr: np.ndarray  # int32 [2E]
    rel: np.ndarray  # int16 [2E]
    out: np.ndarray  # int8 [2E], OUT if the row's node is the stored source
    eid: np.ndarray  # int32 [2E]
    meta: dict

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_tables(
        cls,
        node_type_names: list[str],
        relation_names: list[str],
        node_type,
        key,
        name,
        fields,
        src,
        dst,
        edge_rel,
        edge_attr=None,
        doc=None,
        meta: dict | None = None,
    ) -> "Graph":
        n = len(key)
        src = np.asarray(src, dtype=np.int32)
        dst = np.asarray(dst, dtype=np.int32)
        edge_rel = np.asarray(edge_rel, dtype=np.int16)
        if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
            raise ValueError("edge endpoint out of range 0..N-1")
        if edge_attr is None:
            edge_attr = np.full(len(src), "", dtype=object)
        indptr, nbr, rel, out, eid = build_csr(n, src, dst, edge_rel)
        g = cls(
            node_type_names=list(node_type_names),
            relation_names=list(relation_names),
            node_type=np.asarray(node_type, dtype=np.int16),
            key=np.asarray(key, dtype=object),
            name=np.asarray(name, dtype=object),
            fields=np.asarray([f if isinstance(f, str) else json.dumps(f, ensure_ascii=False) for f in fields], dtype=object),
            doc=np.asarray(doc if doc is not None else [""] * n, dtype=object),
            src=src,
            dst=dst,
            edge_rel=edge_rel,
            edge_attr=np.asarray(edge_attr, dtype=object),
            indptr=indptr,
            nbr=nbr,
            rel=rel,
            out=out,
            eid=eid,
            meta=dict(meta or {}),
        )
        return g

    # ---------------------------------------------------------------- queries
    @property
    def num_nodes(self) -> int:
        return len(self.key)

    @property
    def num_edges(self) -> int:
        return len(self.src)

    def type_name(self, v: int) -> str:
        return self.node_type_names[int(self.node_type[v])]

    def source_id(self, v: int) -> str:
        """The node's id in its source (``OMIM:100800``, ``ORPHA:15``, ``NCBIGene:2200``, ``HP:0001166``): what tells
        same-named nodes apart (BioKG's OMIM diseases and their Orphanet twins)."""
        return str(self.key[v])

    def node_fields(self, v: int) -> dict:
        return json.loads(self.fields[v]) if self.fields[v] else {}

    def check_node(self, v) -> int:
        """Return v as an int or raise ValueError naming the valid range."""
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"node index must be an integer, got {v!r}")
        if not 0 <= v < self.num_nodes:
            raise ValueError(f"node index {v} is out of range 0..{self.num_nodes - 1}")
        return int(v)

    def neighbors(self, v: int) -> slice:
        """The CSR slice of node v: index nbr/rel/out/eid with it."""
        return slice(int(self.indptr[v]), int(self.indptr[v + 1]))

    def degree(self, v: int) -> int:
        return int(self.indptr[v + 1] - self.indptr[v])

    def type_ids(self, names) -> np.ndarray:
        return _lookup(names, self.node_type_names, "node type")

    def relation_ids(self, names) -> np.ndarray:
        return _lookup(names, self.relation_names, "edge type")

    def candidate_ids(self) -> np.ndarray:
        """Sorted ids of the nodes a ranking is scored over (types in ``meta['candidate_types']``; None = all)."""
        types = self.meta.get("candidate_types")
        if types is None:
            return np.arange(self.num_nodes, dtype=np.int64)
        return np.flatnonzero(np.isin(self.node_type, self.type_ids(types))).astype(np.int64)

    def candidates(self) -> np.ndarray | None:
        """``candidate_ids`` where the graph restricts what a ranking is scored over; None where every node counts."""
        return self.candidate_ids() if self.meta.get("candidate_types") else None

    def counts_by_type(self) -> dict[str, int]:
        counts = np.bincount(self.node_type, minlength=len(self.node_type_names))
        return {t: int(c) for t, c in zip(self.node_type_names, counts)}

    def counts_by_relation(self) -> dict[str, int]:
        counts = np.bincount(self.edge_rel, minlength=len(self.relation_names))
        return {r: int(c) for r, c in zip(self.relation_names, counts)}

    def summary(self) -> dict:
        return {
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "nodes_by_type": self.counts_by_type(),
            "edges_by_relation": self.counts_by_relation(),
            **({"excluded": self.meta["excluded"]} if "excluded" in self.meta else {}),  # what a build left out
        }

    # ---------------------------------------------------------------- persistence
    def save(self, directory: str | Path) -> None:
        """Write the graph atomically: a temporary sibling directory renamed into place."""
        with atomic_dir(directory) as tmp:
            pd.DataFrame(
                {"key": self.key, "type": self.node_type, "name": self.name, "fields": self.fields, "doc": self.doc}
            ).to_parquet(tmp / "nodes.parquet", index=False)
            pd.DataFrame({"src": self.src, "dst": self.dst, "rel": self.edge_rel, "attr": self.edge_attr}).to_parquet(
                tmp / "edges.parquet", index=False
            )
            for a in _CSR_ARRAYS:
                np.save(tmp / f"csr_{a}.npy", getattr(self, a))
            schema = {"node_types": self.node_type_names, "relations": self.relation_names, "meta": self.meta}
            (tmp / "schema.json").write_text(json.dumps(schema, indent=1, ensure_ascii=False))
            files = checksums(tmp)
            (tmp / "summary.json").write_text(json.dumps({**self.summary(), "files": files}, indent=1))

    @classmethod
    def load(cls, directory: str | Path, mmap: bool = True) -> "Graph":
        """The graph saved in ``directory``, checked (shapes, id ranges, CSR offsets) so that a damaged file is
        one clear error here rather than a wrong neighbor or an IndexError inside a tool."""
        directory = Path(directory)
        missing = [f for f in ("schema.json", "nodes.parquet", "edges.parquet", *(f"csr_{a}.npy" for a in _CSR_ARRAYS))
                   if not (directory / f).exists()]
        if missing:
            raise UserError(f"no graph at {directory}: missing {', '.join(missing)} (run the build_graph stage)")
        _verify_checksums(directory)
        schema = _read(directory / "schema.json", lambda p: json.loads(p.read_text(encoding="utf-8")))
        nodes = _read(directory / "nodes.parquet", lambda p: _columns(pd.read_parquet(p), (
            ("type", np.int16), ("key", object), ("name", object), ("fields", object), ("doc", object))))
        edges = _read(directory / "edges.parquet", lambda p: _columns(pd.read_parquet(p), (
            ("src", np.int32), ("dst", np.int32), ("rel", np.int16), ("attr", object))))
        csr = {a: _read(directory / f"csr_{a}.npy", lambda p: np.load(p, mmap_mode="r" if mmap else None))
               for a in _CSR_ARRAYS}
        graph = _read(directory / "schema.json", lambda p: cls(
            node_type_names=schema["node_types"], relation_names=schema["relations"],
            node_type=nodes["type"], key=nodes["key"], name=nodes["name"], fields=nodes["fields"], doc=nodes["doc"],
            src=edges["src"], dst=edges["dst"], edge_rel=edges["rel"], edge_attr=edges["attr"],
            meta=schema.get("meta", {}), **csr))
        graph._verify(directory)
        return graph

    def _verify(self, directory: Path) -> None:
        """Cheap consistency checks: array lengths, id ranges (min/max) and monotone CSR offsets."""
        n, e = self.num_nodes, self.num_edges
        checks = [
            ("nodes.parquet", _in_range(self.node_type, len(self.node_type_names)), "node type ids out of range"),
            ("edges.parquet", _in_range(self.src, n) and _in_range(self.dst, n), "edge endpoints out of range"),
            ("edges.parquet", _in_range(self.edge_rel, len(self.relation_names)), "relation ids out of range"),
            ("csr_indptr.npy", self.indptr.shape == (n + 1,) and self.indptr[0] == 0
             and self.indptr[-1] == 2 * e and bool(np.all(self.indptr[1:] >= self.indptr[:-1])),
             f"offsets are not {n + 1} non-decreasing values from 0 to {2 * e}"),
        ]
        for name, bound in (("nbr", n), ("rel", len(self.relation_names)), ("out", 2), ("eid", e)):
            a = getattr(self, name)
            checks.append((f"csr_{name}.npy", a.shape == (2 * e,) and _in_range(a, bound),
                           f"expected {2 * e} values in 0..{bound - 1}"))
        for file, ok, what in checks:
            if not ok:
                raise UserError(f"damaged graph file {directory / file}: {what}; rebuild it (build_graph)")


def _verify_checksums(directory: Path) -> None:
    """The files against the checksums the build wrote into summary.json; a graph without them is refused."""
    if not (directory / "summary.json").is_file():
        raise UserError(f"the graph at {directory} has no summary.json (its file checksums): rebuild it (build_graph)")
    summary = _read(directory / "summary.json", lambda p: json.loads(p.read_text(encoding="utf-8")))
    verify_checksums(directory, summary.get("files") if isinstance(summary, dict) else None, "graph", "summary.json",
                     "build_graph")


def build_csr(n: int, src: np.ndarray, dst: np.ndarray, rel: np.ndarray):
    """CSR over both directions, each row sorted by (neighbor id, relation, direction)."""
    e = len(src)
    rows = np.concatenate([src, dst])
    nbr = np.concatenate([dst, src]).astype(np.int32)
    rels = np.concatenate([rel, rel]).astype(np.int16)
    out = np.concatenate([np.full(e, OUT, np.int8), np.full(e, IN, np.int8)])
    eid = np.concatenate([np.arange(e, dtype=np.int32)] * 2)
    order = np.lexsort((out, rels, nbr, rows))
    counts = np.bincount(rows, minlength=n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, nbr[order], rels[order], out[order], eid[order]


def _read(path: Path, reader):
    """``reader(path)``, with a missing or unreadable file as one clear error naming it."""
    try:
        return reader(path)
    except (OSError, ValueError, KeyError, TypeError, EOFError) as e:  # pyarrow's and numpy's errors are ValueErrors
        why = " ".join(str(e).split())
        raise UserError(f"damaged graph file {path} ({type(e).__name__}: {why}); rebuild it (build_graph)") from None


def _columns(table: pd.DataFrame, columns) -> dict:
    return {c: table[c].to_numpy(t) for c, t in columns}


def _in_range(a: np.ndarray, bound: int) -> bool:
    return len(a) == 0 or (int(a.min()) >= 0 and int(a.max()) < bound)


def _lookup(names, vocabulary: list[str], what: str) -> np.ndarray:
    if isinstance(names, str):
        names = [names]
    index = {n: i for i, n in enumerate(vocabulary)}
    unknown = [n for n in names if n not in index]
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(map(repr, unknown))}; valid: {', '.join(vocabulary)}")
    return np.array(sorted({index[n] for n in names}), dtype=np.int64)
