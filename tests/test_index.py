import numpy as np
import pytest

from ark.errors import UserError

from ark.index import load_relevance
from ark.index.bm25 import BM25Index
from ark.index.dense import DenseIndex
from ark.index.topk import top_k
from ark.tools.toolbox import Toolbox
from tests.helpers import tiny_graph

DOCS = ["a hereditary disorder of the heart valves", "a gene that encodes a kinase", "inflammation of the liver",
        "fracture of the thigh bone", "a protein found in the mitochondrion"]


def test_top_k_orders_by_score_then_index_and_drops_zeros():
    ids, scores = top_k(np.array([0.0, 2.0, 1.0, 2.0, 0.0, 1.0], np.float32), 3)
    assert ids.tolist() == [1, 3, 2] and scores.tolist() == [2.0, 2.0, 1.0]
    assert top_k(np.zeros(4, np.float32), 3)[0].tolist() == []


def test_bm25_round_trip_and_subset_scores(tmp_path):
    index = BM25Index.build(DOCS)
    index.save(tmp_path / "bm25")
    loaded = load_relevance("bm25", tmp_path / "bm25")
    ids, scores = loaded.search("kinases encoding genes", 5)  # stemming: kinases -> kinas
    assert ids.tolist() == [1]
    assert np.allclose(loaded.score("kinases encoding genes", np.array([0, 1, 4])), [0, scores[0], 0])
    with pytest.raises(UserError, match="build_index"):
        load_relevance("bm25", tmp_path / "missing")


def test_dense_minilm_behind_the_same_interface(tmp_path):
    index = DenseIndex.build(DOCS, bf16=False)
    assert index.embeddings.shape == (5, 384)
    ids, scores = index.search("cardiac valve disease", 3)
    assert ids[0] == 0  # no word in common with 'heart valves' except 'valve': semantics, not overlap
    assert np.allclose(index.score("cardiac valve disease", np.sort(ids)), scores[np.argsort(ids)], atol=1e-5)
    index.save(tmp_path / "dense")
    again = load_relevance("dense", tmp_path / "dense")
    assert again.search("hepatitis", 1)[0].tolist() == [2]
    # the tools run unchanged on it
    g = tiny_graph()
    obs = Toolbox(g, DenseIndex.build(g.doc, bf16=False)).search_in_neighborhood(0, query="eye lens")
    assert obs.nodes[0] == 4


def test_a_bm25_index_is_byte_identical_across_processes(tmp_path):
    """bm25s numbers stemmed terms in set order; the index must not depend on Python's hash seed."""
    import os
    import subprocess
    import sys

    from ark.io import hash_paths
    from tests.conftest import ROOT

    code = ("import sys; from ark.index.bm25 import BM25Index; from tests.helpers import tiny_graph; "
            "BM25Index.build(tiny_graph().doc).save(sys.argv[1])")
    digests = []
    for seed in ("1", "2"):
        out = tmp_path / seed
        out.mkdir()
        subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)})
        digests.append(hash_paths([out])[str(out)])
    assert digests[0] == digests[1]


def test_dense_bf16_auto_is_resolved_to_what_this_cpu_computes_in(monkeypatch):
    """`bf16: auto` never reaches an index's settings or a run's identity: they record what the embeddings were
    computed in, so an index built on an AMX machine is not taken for one built in float32 elsewhere."""
    import ark.llm.weights as weights
    from ark.index import index_settings
    from tests.conftest import compose_cfg

    cfg = compose_cfg(["retriever=dense"])
    for native in (True, False):
        monkeypatch.setattr(weights, "cpu_has_bf16", lambda native=native: native)
        assert index_settings(cfg.retriever)["params"] == {"bf16": native}


@pytest.mark.parametrize("name, damage", [("ark_bm25.json", b'{"stopwords": '), ("params.index.json", b"\x00\x01"),
                                          ("vocab.index.json", b"[1, 2")])
def test_a_damaged_bm25_index_is_one_clear_error(tmp_path, name, damage):
    BM25Index.build(DOCS).save(tmp_path / "bm25")
    assert (tmp_path / "bm25" / name).exists()
    (tmp_path / "bm25" / name).write_bytes(damage)
    with pytest.raises(UserError, match=r"damaged bm25 index at .*bm25 .*rebuild it \(build_index\)"):
        load_relevance("bm25", tmp_path / "bm25")
