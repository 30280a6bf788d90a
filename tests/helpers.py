"""Test doubles (a tiny hand-made graph with its BM25 index) and what the layering and stage-deps tests share:
reading the ark modules a source file imports."""
from pathlib import Path

from ark.graph import Graph
from ark.stage_deps import SRC, imported, module_file  # noqa: F401  (the layering test reads imports too)
from ark.index.bm25 import BM25Index

TYPES = ["disease", "gene/protein", "effect/phenotype"]
RELATIONS = ["associated with", "phenotype present", "is_a"]


def tiny_graph() -> Graph:
    """0: disease Marfan; 1: gene FBN1; 2-4: phenotypes; 5: disease Holt-Oram; 6..30: phenotypes of a hub disease 5."""
    names = ["Marfan syndrome", "FBN1", "Tall stature", "Arachnodactyly", "Ectopia lentis", "Holt-Oram syndrome"]
    types = [0, 1, 2, 2, 2, 0]
    docs = [
        "Marfan syndrome disease connective tissue",
        "FBN1 fibrillin 1 gene connective tissue",
        "Tall stature height above expected",
        "Arachnodactyly long slender fingers",
        "Ectopia lentis dislocation of the lens of the eye",
        "Holt-Oram syndrome heart hand disease",
    ]
    src, dst, rel = [1, 0, 0, 0, 3, 0], [0, 2, 3, 4, 2, 0], [0, 1, 1, 1, 2, 2]  # last edge: a self loop
    for i in range(25):  # hub: Holt-Oram has 25 phenotype neighbors
        names.append(f"Finding {i}")
        types.append(2)
        docs.append(f"finding number {i} of the heart" + (" valve" if i % 5 == 0 else ""))
        src.append(5)
        dst.append(6 + i)
        rel.append(1)
    n = len(names)
    return Graph.from_tables(TYPES, RELATIONS, types, [f"N:{i}" for i in range(n)], names, [{}] * n,
                             src, dst, rel, doc=docs)


def tiny_index(graph: Graph) -> BM25Index:
    return BM25Index.build(graph.doc, stemmer=None)


BIOKG_MINI = Path(__file__).parent / "fixtures" / "biokg_mini"


def biokg_mini_graph() -> Graph:
    """BioKG built by the real builder from the committed verbatim subset of its sources."""
    from ark.data.biokg import build_biokg

    files = {n: BIOKG_MINI / n for n in ("hp.obo", "phenotype.hpoa", "genes_to_phenotype.txt", "GO.sqlite",
                                         "org.Hs.eg.sqlite")}
    return build_biokg(files, ["disease", "gene/protein"], 100)

