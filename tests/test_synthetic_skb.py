"""The STaRK-size generator (ark.data.synthetic_skb) at small sizes: STaRK's schema and files, heavy-tailed degrees,
determinism, exact gold, and the stages running on a generated dataset."""
import numpy as np
import pytest

from ark.data.stark import load_stark_splits, read_qa_csv
from ark.data.synthetic_skb import generate_skb
from ark.errors import UserError
from ark.graph.stark import (MAG_EDGE_TYPES, MAG_NODE_TYPES, PRIME_EDGE_TYPES, PRIME_NODE_TYPES, load_stark_skb,
                             read_stark_files)
from tests.conftest import compose_cfg

pytestmark = pytest.mark.e2e  # whole module: see pyproject's e2e marker

NODES = 20_000


@pytest.fixture(scope="module", params=["mag", "prime"])
def generated(request, tmp_path_factory):
    """(skb, raw dir, generator result, built Graph) for a 20k-node graph."""
    skb = request.param
    out = tmp_path_factory.mktemp(skb)
    result = generate_skb(skb, out, NODES, seed=3, queries=120)
    return skb, out, result, load_stark_skb(skb, out)


def degrees(graph, relation: str, node_type: str) -> np.ndarray:
    """Per node of `node_type`: its number of `relation` edges."""
    e = graph.edge_rel == graph.relation_ids(relation)[0]
    counts = np.bincount(graph.src[e], minlength=graph.num_nodes) + np.bincount(graph.dst[e],
                                                                                 minlength=graph.num_nodes)
    return counts[graph.node_type == graph.type_ids(node_type)[0]]


def test_the_files_have_starks_schema_and_size(generated):
    skb, out, result, graph = generated
    files = read_stark_files(skb, out)
    node_types, edge_types = (MAG_NODE_TYPES, MAG_EDGE_TYPES) if skb == "mag" else (PRIME_NODE_TYPES,
                                                                                    PRIME_EDGE_TYPES)
    assert files["node_type_dict"] == node_types and files["edge_type_dict"] == edge_types
    assert len(files["node_types"]) == NODES and set(np.unique(files["node_types"])) == set(node_types)
    assert graph.node_type_names == list(node_types.values())
    assert set(graph.relation_names) == set(edge_types.values())
    # every edge joins the node types its relation joins in the real graph
    allowed = {"author___affiliated_with___institution": {("author", "institution")},
               "paper___cites___paper": {("paper", "paper")},
               "paper___has_topic___field_of_study": {("field_of_study", "paper")},
               "author___writes___paper": {("author", "paper")},
               "expression present": {("gene/protein", "anatomy")},
               "synergistic interaction": {("drug", "drug")},
               "indication": {("disease", "drug")}}
    for relation, pairs in allowed.items():
        if relation not in graph.relation_names:
            continue
        e = graph.edge_rel == graph.relation_ids(relation)[0]
        types = {tuple(sorted((graph.node_type_names[a], graph.node_type_names[b])))
                 for a, b in set(zip(graph.node_type[graph.src[e]].tolist(), graph.node_type[graph.dst[e]].tolist()))}
        assert types == {tuple(sorted(p)) for p in pairs}, relation
    # the real graph's edges per node, less the repeated pairs dropped
    real_arcs_per_node = 39_700_000 / 1_872_968 if skb == "mag" else 8_100_498 / 129_375
    assert 0.85 < result["arcs"] / NODES / real_arcs_per_node <= 1.0
    if skb == "mag":  # papers are the last id block, as in STaRK-MAG
        assert graph.type_name(NODES - 1) == "paper" and graph.type_name(0) == "author"
        assert graph.meta["candidate_types"] == ["paper"]


def test_degrees_are_heavy_tailed_on_the_hub_side_only(generated):
    skb, _, _, graph = generated
    if skb == "mag":
        hubs, plain = degrees(graph, "paper___has_topic___field_of_study", "field_of_study"), \
            degrees(graph, "paper___has_topic___field_of_study", "paper")
    else:
        hubs, plain = degrees(graph, "expression present", "anatomy"), degrees(graph, "synergistic interaction", "drug")
    top = np.sort(hubs)[::-1][: len(hubs) // 100]
    assert hubs.max() >= 20 * np.median(hubs) and top.sum() >= 0.1 * hubs.sum()
    assert plain.max() <= 10 * max(np.median(plain), 1)


def test_the_gold_is_what_the_built_graph_implies(generated):
    skb, out, result, graph = generated
    queries = {int(q["id"]): q for q in read_qa_csv(out / "qa" / "stark_qa" / "stark_qa.csv")}
    made = result["query_list"]
    assert len(queries) == len(made) == 120
    assert {q["template"] for q in made} == {"selective", "frequent"}
    hops = {"mag": {"selective": [("author___writes___paper", "author"),
                                  ("paper___has_topic___field_of_study", "field_of_study")],
                    "frequent": [("paper___has_topic___field_of_study", "field_of_study"),
                                 ("paper___cites___paper", "paper")]},
            "prime": {"selective": [("associated with", "disease"), ("interacts with", "biological_process")],
                      "frequent": [("expression present", "anatomy"), ("interacts with", "pathway")]}}[skb]
    answer_type = graph.type_ids("paper" if skb == "mag" else "gene/protein")[0]
    for q in made:
        gold = None
        for (relation, anchor_type), anchor in zip(hops[q["template"]], q["anchors"]):
            assert graph.type_name(anchor) == anchor_type and str(graph.name[anchor]) in q["query"]
            sl = graph.neighbors(anchor)
            nbr, rel = np.asarray(graph.nbr[sl]), np.asarray(graph.rel[sl])
            keep = (rel == graph.relation_ids(relation)[0]) & (graph.node_type[nbr] == answer_type)
            if relation == "paper___cites___paper":
                keep &= nbr > anchor  # a paper cites older papers only: the citing one has the larger id
            linked = set(nbr[keep].tolist())
            gold = linked if gold is None else gold & linked
        assert sorted(gold) == queries[q["id"]]["answer_ids"] and 1 <= len(gold) <= 20, q["query"]
    # frequent-terms questions name hubs: their anchors have far more neighbors than the selective ones'
    first_degree = {kind: np.median([graph.degree(q["anchors"][0]) for q in made if q["template"] == kind])
                    for kind in ("selective", "frequent")}
    assert first_degree["frequent"] >= 5 * first_degree["selective"]


def test_the_splits_partition_the_questions(generated):
    _, out, result, _ = generated
    splits = load_stark_splits(out / "qa")
    ids = [q["id"] for split in splits.values() for q in split]
    assert sorted(ids, key=int) == [str(i) for i in range(len(result["query_list"]))]
    assert all(len(splits[s]) > 0 for s in ("train", "val", "test"))


def test_the_same_seed_writes_identical_files_and_another_seed_does_not(tmp_path):
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        generate_skb("prime", tmp_path / name, 2_000, seed=seed, queries=20)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) == 10  # six SKB files, the QA CSV, three split files
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    assert (tmp_path / "a" / "processed" / "node_info.pkl").read_bytes() != \
        (tmp_path / "c" / "processed" / "node_info.pkl").read_bytes()


def test_a_draw_of_the_rarest_text_words_is_a_word(tmp_path, monkeypatch):
    """Zipf draws reach the last of the text vocabulary's words; a field's second word skips the function words
    (at MAG size, 1,872,968 nodes, a draw there was once an IndexError)."""
    import ark.data.synthetic_skb as skb

    monkeypatch.setattr(skb.Vocabulary, "sample", lambda self, rng, n: np.full(n, len(self.cdf) - 1, np.int32))
    generate_skb("mag", tmp_path, 2_000, seed=1, queries=5)
    assert (tmp_path / "processed" / "node_info.pkl").stat().st_size > 0


def test_bad_settings_are_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="nodes must be an integer >= 1000"):
        generate_skb("mag", tmp_path, 10)
    with pytest.raises(UserError, match="no synthetic generator for STaRK 'amazon'"):
        generate_skb("amazon", tmp_path, 5_000)


def test_the_stages_run_on_a_generated_dataset(tmp_path):
    """download (generates) -> build_graph -> build_index -> make_queries -> baseline, through the stages' run()."""
    from ark.stages import baseline, build_graph, build_index, download, make_queries

    overrides = [f"paths.data={tmp_path}/data", f"paths.results={tmp_path}/results", f"paths.root={tmp_path}",
                 "logger=none", "eval.progress=false", "dataset=synthetic_mag", "dataset.generate.nodes=3000",
                 "dataset.generate.queries=40", "queries=generated"]
    cfg = compose_cfg(overrides)
    download.run(cfg)
    summary = build_graph.run(cfg)
    assert summary["num_nodes"] == 3000 and summary["nodes_by_type"]["paper"] > 1000
    build_index.run(cfg)
    counts = make_queries.run(cfg)["queries"]
    assert sum(counts.values()) == 40
    metrics = baseline.run(cfg)
    assert metrics["n_queries"] == counts["test"] and 0 <= metrics["hit@1"] <= 1

    from ark.graph import load_graph

    graph = load_graph(cfg.dataset)
    assert graph.meta["source"] == "ark.data.synthetic_skb" and graph.meta["generate"]["nodes"] == 3000
    with pytest.raises(UserError, match="queries=generated"):
        make_queries.run(compose_cfg(overrides[:-1] + ["queries=stark"]))
    with pytest.raises(UserError, match="no setting nodez"):
        download.run(compose_cfg(overrides + ["+dataset.generate.nodez=5"]))
