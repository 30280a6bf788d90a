"""search_in_neighborhood's fast path (posting lists looked up per term the cheapest way, top k without a full sort)
gives the observations of the implementation before it, on random calls over generated STaRK-shaped graphs."""
import types

import numpy as np
import pytest

import ark.index.bm25 as bm25_module
import ark.tools.toolbox as toolbox_module
from ark.data.synthetic_skb import generate_skb
from ark.graph.graph import OUT
from ark.graph.stark import load_stark_skb
from ark.index.bm25 import BM25Index
from ark.index.topk import top_k
from ark.tools.toolbox import Observation, Toolbox

pytestmark = pytest.mark.e2e  # whole module: see pyproject's e2e marker


def search_in_neighborhood_before(self, node_index, query=None, node_type=None, edge_type=None, state=None):
    """Toolbox.search_in_neighborhood as it was before the fast path (commit aaeb54d), verbatim: the reference."""
    g, k = self.graph, self.config.neighbor_k
    center = self._node(node_index)
    query = None if query is None else toolbox_module._as_text(query, "query")
    type_ids = self._filter(node_type, g.type_ids, "node_type")
    rel_ids = self._filter(edge_type, g.relation_ids, "edge_type")
    sl = g.neighbors(center)
    nbr, rel, out = np.asarray(g.nbr[sl]), np.asarray(g.rel[sl]), np.asarray(g.out[sl])
    keep = nbr != center
    if type_ids is not None:
        keep &= np.isin(g.node_type[nbr], type_ids)
    if rel_ids is not None:
        keep &= np.isin(rel, rel_ids)
    nbr, rel, out = nbr[keep], rel[keep], out[keep]
    starts = np.flatnonzero(np.r_[True, nbr[1:] != nbr[:-1]]) if len(nbr) else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], len(nbr)]
    ids = nbr[starts]
    total = len(ids)
    header = f"Neighbors of {self._label(center)}"
    filters = [f"{n}={v}" for n, v in (("node_type", node_type), ("edge_type", edge_type)) if v]
    if filters:
        header += f" ({', '.join(filters)})"
    if total == 0:
        return Observation(text=f"{header}: none.")
    if query and query.strip():
        scores = self.relevance.score(query, ids)
        order = np.lexsort((ids, -scores))[:k]
        how = f"ranked by relevance to {query!r}"
    else:
        scores, order = None, np.arange(min(k, total))
        how = "in node-index order"
    lines = [f"{header}: showing {len(order)} of {total}, {how}:"]
    for i in order:
        v, lo, hi = int(ids[i]), starts[i], ends[i]
        links = ", ".join(
            f"-[{g.relation_names[r]}]->" if d == OUT else f"<-[{g.relation_names[r]}]-"
            for r, d in zip(rel[lo:hi], out[lo:hi])
        )
        lines.append(self._line(v, None if scores is None else float(scores[i]), links))
    return Observation(text="\n".join(lines), nodes=[int(ids[i]) for i in order])


@pytest.fixture(scope="module", params=["mag", "prime"])
def toolbox(request, tmp_path_factory):
    """A generated graph (PRIME: neighbors reached by several relations) with its BM25 index."""
    out = tmp_path_factory.mktemp(request.param)
    generate_skb(request.param, out, 4_000, seed=7, queries=1)
    graph = load_stark_skb(request.param, out)
    return Toolbox(graph, BM25Index.build(graph.doc))


def random_calls(graph, n: int, rng: np.random.Generator) -> list[dict]:
    """Random nodes and the top hubs; no query, blank, or 1-5 words of random documents (frequent words included,
    and a word of no document); no filter, or a type / relation filter as a string or a list."""
    degree = np.diff(np.asarray(graph.indptr))
    hubs = np.argsort(-degree, kind="stable")[:20]
    calls = []
    for _ in range(n):
        call = {"node_index": int(rng.choice(hubs) if rng.random() < 0.4 else rng.integers(graph.num_nodes))}
        kind = rng.random()
        if kind < 0.1:
            call["query"] = rng.choice(["", "  "])
        elif kind < 0.9:
            words = str(graph.doc[rng.integers(graph.num_nodes)]).split()
            call["query"] = " ".join(rng.choice(words, int(rng.integers(1, 6)))) + (" zzxqj" if kind > 0.8 else "")
        if rng.random() < 0.3:
            names = rng.choice(graph.node_type_names, int(rng.integers(1, 3)), replace=False).tolist()
            call["node_type"] = names[0] if len(names) == 1 else names
        if rng.random() < 0.3:
            call["edge_type"] = rng.choice(graph.relation_names, int(rng.integers(1, 3)), replace=False).tolist()
        calls.append(call)
    return calls


@pytest.mark.parametrize("table_min", [bm25_module.TABLE_MIN_IDS, 0])  # 0: the position table everywhere
def test_the_fast_path_gives_the_observations_of_the_implementation_before_it(toolbox, table_min, monkeypatch):
    monkeypatch.setattr(bm25_module, "TABLE_MIN_IDS", table_min)
    before = types.MethodType(search_in_neighborhood_before, toolbox)
    for call in random_calls(toolbox.graph, 300, np.random.default_rng(table_min)):
        now, then = toolbox.search_in_neighborhood(**call), before(**call)
        assert (now.text, now.nodes) == (then.text, then.nodes), call


def test_neighbor_scores_are_the_whole_corpus_float32_sums(toolbox, monkeypatch):
    monkeypatch.setattr(bm25_module, "TABLE_MIN_IDS", 0)  # the position table wherever a posting list is long
    graph, index, rng = toolbox.graph, toolbox.relevance, np.random.default_rng(1)
    for call in random_calls(graph, 100, rng):
        sl = graph.neighbors(call["node_index"])
        ids = np.unique(np.asarray(graph.nbr[sl]))
        query = call.get("query") or "which"
        full = np.zeros(index.num_docs, dtype=np.float32)
        for t in index.term_ids(query):
            lo, hi = index.indptr[t], index.indptr[t + 1]
            full[index.indices[lo:hi]] += index.data[lo:hi]
        assert index.score(query, ids).tobytes() == full[ids].tobytes()
    assert index._position_table().max() == -1  # left clean for the next call


class DenseLike:
    """A relevance with negative scores and many ties, as a cosine can give (the generic path)."""

    name = "a test double"

    def score(self, query, ids):
        return (np.cos(np.asarray(ids) * (len(query) + 1.0)) * 3).round().astype(np.float32)


def test_a_relevance_without_posting_lists_ranks_as_before(toolbox):
    dense = Toolbox(toolbox.graph, DenseLike())
    before = types.MethodType(search_in_neighborhood_before, dense)
    for call in random_calls(toolbox.graph, 200, np.random.default_rng(2)):
        now, then = dense.search_in_neighborhood(**call), before(**call)
        assert (now.text, now.nodes) == (then.text, then.nodes), call


def test_top_k_of_every_score_is_the_first_k_of_a_full_sort():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n, k = int(rng.integers(0, 60)), int(rng.integers(1, 25))
        scores = rng.choice([-1.5, 0.0, 0.0, 0.5, 1.0, 2.25], n).astype(np.float32) * rng.choice([1, -1])
        expected = np.lexsort((np.arange(n), -scores))[:k]
        assert top_k(scores, k, positive_only=False)[0].tolist() == expected.tolist(), (scores, k)
