import numpy as np
import pytest

from ark.errors import UserError

from ark.index import BM25Retriever, DenseRetriever
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
    loaded = BM25Retriever(name="bm25").load(tmp_path / "bm25")
    ids, scores = loaded.search("kinases encoding genes", 5)  # stemming: kinases -> kinas
    assert ids.tolist() == [1]
    assert np.allclose(loaded.score("kinases encoding genes", np.array([0, 1, 4])), [0, scores[0], 0])
    with pytest.raises(UserError, match="build_index"):
        BM25Retriever(name="bm25").load(tmp_path / "missing")


@pytest.mark.e2e
def test_dense_minilm_behind_the_same_interface(tmp_path):
    index = DenseIndex.build(DOCS, bf16=False)
    assert index.embeddings.shape == (5, 384)
    ids, scores = index.search("cardiac valve disease", 3)
    assert ids[0] == 0  # no word in common with 'heart valves' except 'valve': semantics, not overlap
    assert np.allclose(index.score("cardiac valve disease", np.sort(ids)), scores[np.argsort(ids)], atol=1e-5)
    index.save(tmp_path / "dense")
    again = DenseRetriever(name="dense").load(tmp_path / "dense")
    assert again.search("hepatitis", 1)[0].tolist() == [2]
    # the tools run unchanged on it
    g = tiny_graph()
    dense_tools = Toolbox(g, DenseIndex.build(g.doc, bf16=False))
    obs = dense_tools.search_in_neighborhood(0, query="eye lens")
    assert obs.nodes[0] == 4
    # and the search tool tells the model which relevance ranks its results
    described = dense_tools.schemas()[0]["function"]["description"]
    assert "all-MiniLM-L6-v2" in described and "BM25" not in described


@pytest.mark.e2e
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
    import ark.machine as machine
    from ark.config import resolved
    from ark.index import index_settings
    from tests.conftest import compose_cfg

    cfg = compose_cfg(["retriever=dense"])
    for native in (True, False):
        monkeypatch.setattr(machine, "cpu_has_bf16", lambda native=native: native)
        assert index_settings(resolved(cfg.retriever))["params"] == {"bf16": native}


@pytest.mark.e2e  # an encoder model
def test_a_dense_index_reuses_the_embeddings_of_identical_documents(tmp_path):
    DenseIndex.build(DOCS, bf16=False).save(tmp_path / "full")
    docs = DOCS[:2] + ["inflammation of the pancreas"] + DOCS[3:]
    index = DenseIndex.build(docs, bf16=False, reuse=str(tmp_path / "full"))
    full = np.load(tmp_path / "full" / "embeddings.npy")
    assert index.reused == 4
    assert np.array_equal(index.embeddings[[0, 1, 3, 4]], full[[0, 1, 3, 4]])  # taken, not recomputed
    assert np.allclose(index.embeddings[2], DenseIndex.build(docs[2:3], bf16=False).embeddings[0], atol=1e-5)
    assert index.search("pancreatitis", 1)[0].tolist() == [2]
    # another dtype's embeddings are not taken: every document is encoded
    assert DenseIndex.build(docs, bf16=True, reuse=str(tmp_path / "full")).reused == 0
    with pytest.raises(UserError, match="reuse: no dense index with document digests"):
        DenseIndex.build(docs, bf16=False, reuse=str(tmp_path / "missing"))


def test_a_dense_index_encodes_each_query_text_once(monkeypatch):
    index = DenseIndex.build(DOCS, bf16=False)
    calls = []
    encode = index.encode
    monkeypatch.setattr(index, "encode", lambda texts, *a, **k: calls.append(list(texts)) or encode(texts, *a, **k))
    first = index.search("liver disease", 2)
    again = index.search("liver disease", 2)
    index.score("liver disease", np.array([0, 2]))
    index.search("bone", 1)
    assert calls == [["liver disease"], ["bone"]]
    assert first[0].tolist() == again[0].tolist() and np.array_equal(first[1], again[1])


def test_bf16_auto_takes_what_the_index_was_built_in(tmp_path, monkeypatch):
    """An index built (or pulled) from a CPU of the other kind is used as it is: `auto` follows its info.json, and
    the run's identity records what the embeddings were computed in; an explicit other setting is refused."""
    import json

    import ark.machine as machine
    from ark.build import relevance, spec
    from ark.io import checksums
    from ark.runs.identity import identity
    from tests.conftest import compose_cfg

    index_dir = tmp_path / "dense"
    DenseIndex.build(DOCS, bf16=False).save(index_dir)
    settings = {"name": "dense", "params": {"bf16": False}}
    (index_dir / "info.json").write_text(json.dumps({"retriever": "dense", "num_docs": 5, "settings": settings,
                                                     "files": checksums(index_dir)}))
    monkeypatch.setattr(machine, "cpu_has_bf16", lambda: True)  # this CPU would choose bf16
    cfg = compose_cfg(["retriever=dense", f"dataset.index_dir={index_dir}"])
    loaded = relevance(spec(cfg))
    assert loaded.bf16 is False and loaded.search("hepatitis", 1)[0].tolist() == [2]
    assert identity(spec(cfg), "evaluate")["retriever"] == settings
    with pytest.raises(UserError, match="was built with other retriever settings"):
        relevance(spec(compose_cfg(["retriever=dense", f"dataset.index_dir={index_dir}", "retriever.params.bf16=true"])))


@pytest.mark.parametrize("name, damage", [("ark_bm25.json", b'{"stopwords": '), ("params.index.json", b"\x00\x01"),
                                          ("vocab.index.json", b"[1, 2")])
def test_a_damaged_bm25_index_is_one_clear_error(tmp_path, name, damage):
    BM25Index.build(DOCS).save(tmp_path / "bm25")
    assert (tmp_path / "bm25" / name).exists()
    (tmp_path / "bm25" / name).write_bytes(damage)
    with pytest.raises(UserError, match=r"damaged bm25 index at .*bm25 .*rebuild it \(build_index\)"):
        BM25Retriever(name="bm25").load(tmp_path / "bm25")


def bm25s_reference(docs, method, tmp_path):
    """The index bm25s itself builds (its tokeniser and ``BM25.index``), terms renumbered in sorted order: the
    test oracle for ``BM25Index.build``."""
    import bm25s
    import Stemmer

    tokens = bm25s.tokenize(list(docs), stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
    terms = sorted(tokens.vocab, key=tokens.vocab.get)
    rank = {t: i for i, t in enumerate(sorted(terms))}
    ids = [[rank[terms[i]] for i in doc] for doc in tokens.ids]
    retriever = bm25s.BM25(k1=1.2, b=0.75, method=method)
    retriever.index(type(tokens)(ids=ids, vocab={t: rank[t] for t in terms}), show_progress=False)
    retriever.vocab_dict = dict(sorted(retriever.vocab_dict.items(), key=lambda item: item[1]))
    retriever.save(str(tmp_path))
    return tmp_path


def random_corpus(n_docs, seed=0):
    """Zipf-like words, some very common, stop words, capitals, non-ASCII, empty documents and repeats."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(2000)] + ["the", "of", "Gene", "gène", "ÅLAND", "kinases", "kinase", "x"]
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.1
    docs = []
    for i in range(n_docs):
        n = 0 if i % 97 == 0 else int(rng.integers(1, 60))
        docs.append(" ".join(rng.choice(vocab, size=n, p=p / p.sum())) + (", w1-w2." if i % 5 == 0 else ""))
    return docs


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_the_chunked_build_is_byte_identical_to_bm25s(tmp_path, method):
    docs = random_corpus(700) + DOCS
    ours = tmp_path / "ours"
    BM25Index.build(docs, method=method, chunk_docs=64).save(ours)
    theirs = bm25s_reference(docs, method, tmp_path / "bm25s")
    names = sorted(p.name for p in theirs.iterdir())
    assert "data.csc.index.npy" in names and ("nonoccurrence_array.index.npy" in names) == (method in ("bm25l", "bm25+"))
    for name in names:
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name


def reference_search(index, query, k):
    scores = np.zeros(index.num_docs, dtype=np.float32)
    for t in index.term_ids(query):
        lo, hi = index.indptr[t], index.indptr[t + 1]
        scores[index.indices[lo:hi]] += index.data[lo:hi]
    return top_k(scores, k), scores


@pytest.mark.e2e  # every query against the whole corpus
def test_pruned_search_and_neighbor_scores_equal_the_whole_corpus_sums(monkeypatch):
    index = BM25Index.build(random_corpus(6000, seed=1))
    monkeypatch.setattr("ark.index.bm25.COMMON_POSTINGS", 50)  # w0..w30 are common at this size
    pruned = []
    out_of_reach = BM25Index._out_of_reach
    monkeypatch.setattr(BM25Index, "_out_of_reach", lambda self, *a: pruned.append(out_of_reach(self, *a)) or pruned[-1])
    rng = np.random.default_rng(2)
    for i in range(300):
        words = [f"w{int(rng.zipf(1.3)) % 2000}" for _ in range(int(rng.integers(1, 6)))]
        query, k = " ".join(words), int(rng.choice([1, 5, 20, 100]))
        (ids, scores), full = reference_search(index, query, k)
        got_ids, got_scores = index.search(query, k)
        assert got_ids.tolist() == ids.tolist() and got_scores.tobytes() == scores.tobytes(), query
        for n in (3, 40, 3000):  # neighbor sets shorter and longer than the posting lists
            some = np.unique(rng.integers(0, index.num_docs, size=n))
            assert index.score(query, some).tobytes() == full[some].tobytes(), query
    assert sum(pruned) > 30 and not all(pruned)  # both paths were taken
