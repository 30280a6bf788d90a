"""BioKG build on the committed verbatim fixture (tests/fixtures/biokg_mini); offline and fast."""
from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ark.data.biokg as biokg
from ark.errors import UserError
from ark.data.biokg import build_biokg, download_sources, extract_sources
from ark.graph.graph import IN, OUT, Graph

FIXTURE = Path(__file__).parent / "fixtures" / "biokg_mini"
FILES = {name: FIXTURE / name for name in
         ("hp.obo", "phenotype.hpoa", "genes_to_phenotype.txt", "GO.sqlite", "org.Hs.eg.sqlite")}
ASPECTS = {"P": "phenotype present", "I": "inheritance", "C": "clinical course", "M": "modifier",
           "H": "past medical history"}
GO_RELATIONS = {"isa": "is_a", "part of": "part of", "regulates": "regulates",
                "positively regulates": "positively regulates", "negatively regulates": "negatively regulates"}


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_biokg(FILES, ["disease", "gene/protein"], 100)


@pytest.fixture(scope="module")
def index(graph) -> dict[str, int]:
    return {k: i for i, k in enumerate(graph.key)}


@pytest.fixture(scope="module")
def triples(graph) -> dict[tuple[str, str, str], str]:
    """(source key, relation, target key) -> edge attribute."""
    return {
        (graph.key[s], graph.relation_names[r], graph.key[d]): a
        for s, d, r, a in zip(graph.src, graph.dst, graph.edge_rel, graph.edge_attr)
    }


def type_of(graph, index, key):
    return graph.type_name(index[key])


def sql(name: str, query: str) -> list[tuple]:
    with sqlite3.connect(FILES[name]) as conn:
        return conn.execute(query).fetchall()


# --------------------------------------------------------------------------- nodes
def test_node_types_follow_prime_names(graph, index):
    for t in ("disease", "gene/protein", "effect/phenotype", "biological_process", "molecular_function",
              "cellular_component"):
        assert t in graph.node_type_names
    assert type_of(graph, index, "OMIM:154700") == "disease"
    assert type_of(graph, index, "ORPHA:228190") == "disease"
    assert type_of(graph, index, "NCBIGene:2200") == "gene/protein"
    assert graph.name[index["NCBIGene:2200"]] == "FBN1"
    assert type_of(graph, index, "HP:0001166") == "effect/phenotype"
    expected = {"BP": "biological_process", "MF": "molecular_function", "CC": "cellular_component"}
    for go_id, ontology in sql("GO.sqlite", "SELECT go_id, ontology FROM go_term"):
        assert type_of(graph, index, go_id) == expected[ontology]
    assert graph.meta["sources"]["HPO"] == "hp/releases/2025-01-16"
    assert graph.meta["sources"]["GO"] == "2022-07-01"


def test_hpo_branch_typing(graph, index):
    assert type_of(graph, index, "HP:0000006") == "mode_of_inheritance"  # Autosomal dominant inheritance
    assert type_of(graph, index, "HP:0000005") == "mode_of_inheritance"
    assert type_of(graph, index, "HP:0000118") == "effect/phenotype"
    assert type_of(graph, index, "HP:0031797") == "clinical_course"
    assert type_of(graph, index, "HP:0040280") == "frequency"  # Obligate
    assert type_of(graph, index, "HP:0000001") == "hpo_other"  # the root belongs to no branch


def test_obsolete_terms_excluded(graph, index):
    assert "is_obsolete: true" in FILES["hp.obo"].read_text()
    assert "HP:0001388" not in index
    assert not any(str(n).startswith("obsolete ") for n in graph.name)


def test_genes_without_edges_not_included(graph, index):
    assert sql("org.Hs.eg.sqlite", "SELECT count(*) FROM genes WHERE gene_id = '105370809'") == [(1,)]
    assert "NCBIGene:105370809" not in index  # FBN1-DT: no GO row, no disease link
    genes = [v for v in range(graph.num_nodes) if graph.type_name(v) == "gene/protein"]
    assert len(genes) == 4
    assert all(graph.degree(v) > 0 for v in genes)


# --------------------------------------------------------------------------- edges
def test_disease_edges_by_aspect(triples):
    hpoa = pd.read_csv(FILES["phenotype.hpoa"], sep="\t", comment="#", dtype=str, keep_default_na=False)
    expected = {}
    for row in hpoa.itertuples(index=False):
        relation = "phenotype absent" if row.qualifier == "NOT" else ASPECTS[row.aspect]
        expected.setdefault((row.database_id, relation, row.hpo_id), row.frequency)
    got = {t: a for t, a in triples.items() if t[0].startswith(("OMIM:", "ORPHA:"))}
    assert got == expected
    assert triples[("OMIM:154700", "inheritance", "HP:0000006")] == ""
    assert triples[("OMIM:154700", "phenotype present", "HP:0002097")] == "HP:0040283"
    assert any(s == "OMIM:129600" and r == "clinical course" for s, r, _ in triples)
    # The NOT row gives an absent edge and no present one.
    assert ("ORPHA:228190", "phenotype absent", "HP:0000271") in triples
    assert ("ORPHA:228190", "phenotype present", "HP:0000271") not in triples


def test_gene_disease_edges_from_both_sources(graph, triples):
    assoc = {(s, d): a for (s, r, d), a in triples.items() if r == "associated with"}
    # FBN1-Marfan is in genes_to_phenotype.txt and in the omim table: one edge, attribute HPO.
    assert assoc[("NCBIGene:2200", "OMIM:154700")] == "HPO"
    assert assoc[("NCBIGene:2200", "OMIM:129600")] == "HPO"
    assert sql("org.Hs.eg.sqlite", "SELECT count(*) FROM omim o JOIN genes g ON o._id = g._id "
               "WHERE g.gene_id = '2200' AND o.omim_id = '154700'") == [(1,)]
    # GJA1-hypoplastic left heart syndrome comes only from the NCBI omim table.
    assert assoc[("NCBIGene:2697", "OMIM:241550")] == "NCBI"
    rel = graph.relation_names.index("associated with")
    pairs = [(s, d) for s, d, r in zip(graph.src, graph.dst, graph.edge_rel) if r == rel]
    assert len(pairs) == len(set(pairs)) == len(assoc) == 6


def test_gene_go_edges_only_to_go_nodes(graph, index, triples):
    go_ids = {g for (g,) in sql("GO.sqlite", "SELECT go_id FROM go_term")}
    expected, skipped = set(), 0
    for table, relation in (("go_bp", "involved in"), ("go_mf", "enables"), ("go_cc", "located in")):
        rows = sql("org.Hs.eg.sqlite", f"SELECT g.gene_id, t.go_id FROM {table} t JOIN genes g ON t._id = g._id")
        for gene_id, go_id in rows:
            if go_id in go_ids:
                expected.add((f"NCBIGene:{gene_id}", relation, go_id))
            else:
                skipped += 1
    assert skipped > 0  # the fixture has annotations to GO terms that are not nodes
    got = {t for t in triples if t[1] in ("involved in", "enables", "located in")}
    assert got == expected
    go_types = {"biological_process", "molecular_function", "cellular_component"}
    assert all(type_of(graph, index, t[2]) in go_types for t in got)
    assert triples[("NCBIGene:2200", "located in", "GO:0005576")] != ""  # evidence code kept


def test_go_parent_relations(triples):
    expected = set()
    for table in ("go_bp_parents", "go_mf_parents", "go_cc_parents"):
        rows = sql("GO.sqlite", f"SELECT c.go_id, p.go_id, t.relationship_type FROM {table} t "
                   "JOIN go_term c ON t._id = c._id JOIN go_term p ON t._parent_id = p._id")
        expected |= {(c, GO_RELATIONS[r], p) for c, p, r in rows if r in GO_RELATIONS}
    got = {t for t in triples if t[0].startswith("GO:")}
    assert got == expected
    assert {r for _, r, _ in got} >= {"is_a", "part of"}
    assert ("GO:0062023", "is_a", "GO:0031012") in got  # collagen-containing ECM is_a extracellular matrix


def test_hpo_is_a_edges(triples):
    assert ("HP:0001166", "is_a", "HP:0001238") in triples  # Arachnodactyly is_a Slender finger


# --------------------------------------------------------------------------- documents
def test_disease_document_renders_relations(graph, index):
    doc = graph.doc[index["OMIM:154700"]]
    assert doc.startswith("- name: Marfan syndrome")
    assert "- relations:" in doc
    assert "Arachnodactyly" in doc and "Ectopia lentis" in doc
    assert "FBN1" in doc
    assert "Autosomal dominant inheritance" in doc


def test_phenotype_document_has_definition_no_relations(graph, index):
    doc = graph.doc[index["HP:0001166"]]
    assert "Abnormally long and slender fingers (spider fingers)." in doc
    assert "- relations:" not in doc


def test_frequency_ids_rendered_as_labels(graph, index):
    doc = graph.doc[index["ORPHA:228190"]]
    assert "Patent ductus arteriosus [Obligate]" in doc
    assert "[Very frequent]" in doc
    assert "HP:004028" not in doc
    assert "Emphysema [Occasional]" in graph.doc[index["OMIM:154700"]]


# --------------------------------------------------------------------------- graph structure
def test_save_load_round_trip(graph, tmp_path):
    graph.save(tmp_path / "g")
    loaded = Graph.load(tmp_path / "g")
    assert loaded.node_type_names == graph.node_type_names
    assert loaded.relation_names == graph.relation_names
    assert loaded.meta == graph.meta
    for name in ("key", "name", "fields", "doc", "edge_attr"):
        assert list(getattr(loaded, name)) == list(getattr(graph, name)), name
    for name in ("node_type", "src", "dst", "edge_rel", "indptr", "nbr", "rel", "out", "eid"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(graph, name), err_msg=name)


def test_csr_invariants(graph):
    e = graph.num_edges
    assert len(graph.nbr) == len(graph.rel) == len(graph.out) == len(graph.eid) == 2 * e
    assert graph.indptr[0] == 0 and graph.indptr[-1] == 2 * e
    seen_out, seen_in = np.zeros(e, int), np.zeros(e, int)
    for v in range(graph.num_nodes):
        sl = graph.neighbors(v)
        nbr = graph.nbr[sl]
        assert np.all(np.diff(nbr) >= 0), f"row {v} not sorted by neighbor"
        for u, r, d, k in zip(nbr, graph.rel[sl], graph.out[sl], graph.eid[sl]):
            assert r == graph.edge_rel[k]
            if d == OUT:
                assert (graph.src[k], graph.dst[k]) == (v, u)
                seen_out[k] += 1
            else:
                assert d == IN and (graph.src[k], graph.dst[k]) == (u, v)
                seen_in[k] += 1
    assert np.all(seen_out == 1) and np.all(seen_in == 1)


# --------------------------------------------------------------------------- download / extract
def _fake_pip(content: bytes):
    """A stand-in for ``_run`` that writes the wheel into the ``-d`` folder instead of downloading."""

    def run(cmd, cwd=None, show=False):
        folder = Path(cmd[cmd.index("-d") + 1])
        (folder / "pkg-1.0-py3-none-any.whl").write_bytes(content)

    return run


def _artefact(sha256: str) -> dict:
    return {"pkg": {"kind": "pypi", "spec": "pkg==1.0", "file": "pkg-1.0-py3-none-any.whl", "sha256": sha256}}


def test_download_bad_sha256_raises_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(biokg, "_run", _fake_pip(b"not the pinned wheel"))
    out = tmp_path / "raw"
    with pytest.raises(UserError, match="sha256"):
        download_sources(_artefact("0" * 64), out)
    assert list(out.iterdir()) == []


def test_download_good_sha256_keeps_file(tmp_path, monkeypatch):
    content = b"the pinned wheel"
    monkeypatch.setattr(biokg, "_run", _fake_pip(content))
    paths = download_sources(_artefact(hashlib.sha256(content).hexdigest()), tmp_path)
    assert Path(paths["pkg"]).read_bytes() == content
    assert [p.name for p in tmp_path.iterdir()] == ["pkg-1.0-py3-none-any.whl"]


def test_extract_sources_missing_artefact(tmp_path):
    artefacts = {"go_db": {"kind": "debian", "file": "r-bioc-go.db_3.16.0-1_all.deb"}}
    with pytest.raises(UserError, match="r-bioc-go.db_3.16.0-1_all.deb"):
        extract_sources(tmp_path / "raw", artefacts, tmp_path / "work")


# --------------------------------------------------------------------------- leave-publication-out
def test_leave_publication_out_drops_exactly_the_annotations_resting_on_those_publications(graph, triples):
    """Reference: the annotations (edges) whose every reference, over all their hpoa rows, is excluded."""
    hpoa = pd.read_csv(FILES["phenotype.hpoa"], sep="\t", comment="#", dtype=str, keep_default_na=False)
    excluded = {"PMID:33436942", "PMID:20702823", "PMID:8188302"}  # the last one only with other PMIDs
    refs = {}
    for row in hpoa.itertuples(index=False):
        relation = "phenotype absent" if row.qualifier == "NOT" else ASPECTS[row.aspect]
        refs.setdefault((row.database_id, relation, row.hpo_id), set()).update(row.reference.split(";"))
    phenotype_relations = ("phenotype present", "phenotype absent")  # inheritance, onset, course are kept
    expected_gone = {t for t, rs in refs.items() if rs <= excluded and t[1] in phenotype_relations}
    assert any(rs <= excluded and t[1] not in phenotype_relations for t, rs in refs.items())
    assert expected_gone and any(rs & excluded and not rs <= excluded for rs in refs.values())

    lpo = build_biokg(FILES, ["disease", "gene/protein"], 100, exclude_publications=excluded)
    lpo_triples = {(lpo.key[s], lpo.relation_names[r], lpo.key[d])
                   for s, d, r in zip(lpo.src, lpo.dst, lpo.edge_rel)}
    assert set(triples) - lpo_triples == expected_gone and lpo_triples <= set(triples)
    assert list(lpo.key) == list(graph.key)  # same nodes: node ids and query files are shared
    counts = lpo.summary()["excluded"]
    assert counts["annotations_removed"] == len(expected_gone) and counts["publications"] == 3
    assert counts["diseases_touched"] == len({t[0] for t in expected_gone})
    index = {k: i for i, k in enumerate(graph.key)}
    for disease in {t[0] for t in expected_gone}:  # documents are rendered without the dropped annotations
        assert lpo.doc[index[disease]] != graph.doc[index[disease]]


def test_case_publications_reads_every_pmid_of_every_case():
    from ark.data.phenopackets import case_publications

    packets = [{"metaData": {"externalReferences": [{"id": "PMID:1"}, {"id": "DOI:x"}, {"id": "PMID:2"}]}},
               {"metaData": {}}, {"id": "case"}]
    assert case_publications(packets) == {"PMID:1", "PMID:2"}


def test_the_cut_follows_the_split_asked_about(tmp_path):
    """An annotation citing a test case's publication and a train case's stays; one citing only the test case's
    goes; cutting for every case drops both. The graph's summary names the file and the split it was cut for."""
    from ark.data.phenopackets import excluded_publications
    from ark.data.queries import split_of

    test_pmid, train_pmid = "PMID:9900000", "PMID:9900001"  # first references: they decide each case's split
    assert split_of(test_pmid) == "test" and split_of(train_pmid) == "train"
    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(json.dumps({"id": i, "metaData": {"externalReferences": [{"id": p} for p in refs]}}) + "\n"
                             for i, refs in (("t", [test_pmid, "PMID:33436942"]), ("r", [train_pmid, "PMID:26903188"]))))
    # the annotations citing the test case's publication and the train case's, and those citing the test case's alone
    both = {(s, r, d) for s, r, d in _annotations("PMID:33436942") if {"PMID:26903188"} <= _refs(s, d)}
    only_test = {(s, r, d) for s, r, d in _annotations("PMID:33436942") if _refs(s, d) == {"PMID:33436942"}}
    assert both and only_test

    pmids, source = excluded_publications(cases, ["test"])
    assert pmids == {test_pmid, "PMID:33436942"} and source["splits"] == ["test"]
    lpo = build_biokg(FILES, ["disease", "gene/protein"], 100, exclude_publications=pmids, excluded_source=source)
    kept = {(lpo.key[s], lpo.relation_names[r], lpo.key[d]) for s, d, r in zip(lpo.src, lpo.dst, lpo.edge_rel)}
    assert both <= kept and not only_test & kept
    assert lpo.summary()["excluded"]["source"] == {**source, "file": "cases.jsonl"}

    everyone, source = excluded_publications(cases)  # every case of the file, train included
    assert source["splits"] is None
    lpo = build_biokg(FILES, ["disease", "gene/protein"], 100, exclude_publications=everyone, excluded_source=source)
    kept = {(lpo.key[s], lpo.relation_names[r], lpo.key[d]) for s, d, r in zip(lpo.src, lpo.dst, lpo.edge_rel)}
    assert not (both | only_test) & kept


def _refs(disease: str, hpo_id: str) -> set[str]:
    hpoa = pd.read_csv(FILES["phenotype.hpoa"], sep="\t", comment="#", dtype=str, keep_default_na=False)
    rows = hpoa[(hpoa.database_id == disease) & (hpoa.hpo_id == hpo_id) & (hpoa.aspect == "P")
                & (hpoa.qualifier != "NOT")]
    return {r for refs in rows.reference for r in refs.split(";")}


def _annotations(pmid: str) -> set[tuple[str, str, str]]:
    """The present-phenotype annotations (disease, relation, phenotype) one of whose references is ``pmid``."""
    hpoa = pd.read_csv(FILES["phenotype.hpoa"], sep="\t", comment="#", dtype=str, keep_default_na=False)
    rows = hpoa[hpoa.reference.str.contains(pmid, regex=False) & (hpoa.aspect == "P") & (hpoa.qualifier != "NOT")]
    return {(d, "phenotype present", h) for d, h in zip(rows.database_id, rows.hpo_id)}
