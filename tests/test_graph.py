import numpy as np
import pytest

from ark.errors import UserError

from ark.graph import IN, OUT, Graph
from tests.helpers import tiny_graph


def test_csr_rows_list_both_directions_sorted_by_neighbor():
    g = tiny_graph()
    assert len(g.nbr) == 2 * g.num_edges
    sl = g.neighbors(0)  # Marfan: FBN1 (in), 3 phenotypes (out), itself (self loop, both directions)
    assert list(g.nbr[sl]) == sorted(g.nbr[sl])
    entries = set(zip(g.nbr[sl].tolist(), g.rel[sl].tolist(), g.out[sl].tolist()))
    assert (1, 0, IN) in entries and (2, 1, OUT) in entries and (0, 2, OUT) in entries
    for e in range(g.num_edges):  # every edge once as OUT at its source, once as IN at its target
        s, d = g.src[e], g.dst[e]
        assert ((g.eid[g.neighbors(s)] == e) & (g.out[g.neighbors(s)] == OUT)).sum() == 1
        assert ((g.eid[g.neighbors(d)] == e) & (g.out[g.neighbors(d)] == IN)).sum() == 1


def test_degree_and_counts():
    g = tiny_graph()
    assert g.degree(5) == 25
    assert g.counts_by_type() == {"disease": 2, "gene/protein": 1, "effect/phenotype": 28}
    assert g.candidate_ids().tolist() == list(range(g.num_nodes))
    g.meta["candidate_types"] = ["disease"]
    assert g.candidate_ids().tolist() == [0, 5]


def test_bad_ids_and_types_are_clear_errors():
    g = tiny_graph()
    with pytest.raises(ValueError, match="out of range 0..30"):
        g.check_node(31)
    with pytest.raises(ValueError, match="must be an integer"):
        g.check_node("3")
    with pytest.raises(ValueError, match="unknown node type 'drug'"):
        g.type_ids(["disease", "drug"])
    with pytest.raises(ValueError, match="out of range"):
        Graph.from_tables(["t"], ["r"], [0, 0], ["a", "b"], ["a", "b"], [{}, {}], [0], [2], [0])


def test_save_load_round_trip(tmp_path):
    g = tiny_graph()
    g.save(tmp_path / "g")
    h = Graph.load(tmp_path / "g")
    assert h.summary() == g.summary()
    for a in ("key", "name", "doc", "indptr", "nbr", "rel", "out", "eid", "src", "dst"):
        assert np.array_equal(np.asarray(getattr(h, a)), np.asarray(getattr(g, a))), a
    assert not (tmp_path / "g.tmp").exists()


def test_load_missing_graph_names_the_stage(tmp_path):
    with pytest.raises(UserError, match="build_graph"):
        Graph.load(tmp_path / "nothing")


def test_a_changed_byte_that_passes_the_range_checks_fails_the_checksum(tmp_path):
    import json

    g = tiny_graph()
    g.save(tmp_path / "g")
    files = json.loads((tmp_path / "g" / "summary.json").read_text())["files"]
    assert set(files) >= {"nodes.parquet", "edges.parquet", "schema.json", "csr_nbr.npy"}
    Graph.load(tmp_path / "g")
    nbr = np.load(tmp_path / "g" / "csr_nbr.npy")
    nbr[[0, 2]] = nbr[[2, 0]]  # still valid ids, same size: only the checksum can tell
    assert not np.array_equal(nbr, np.load(tmp_path / "g" / "csr_nbr.npy"))
    np.save(tmp_path / "g" / "csr_nbr.npy", nbr)
    with pytest.raises(UserError, match=r"csr_nbr.npy: its size or checksum differs"):
        Graph.load(tmp_path / "g")
