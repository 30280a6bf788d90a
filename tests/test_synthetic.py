import re
from collections import defaultdict

import pytest
from omegaconf import OmegaConf

from ark.data.synthetic import make_synthetic_queries
from tests.helpers import biokg_mini_graph

CFG = dict(n_queries=40, seed=3, min_answers=1, max_answers=10, min_candidates=2, max_anchor_uses=50,
           split_fractions=[0.6, 0.2, 0.2])


@pytest.fixture(scope="module")
def graph():
    return biokg_mini_graph()


@pytest.fixture(scope="module")
def made(graph):
    return make_synthetic_queries(graph, OmegaConf.create(CFG))


@pytest.fixture(scope="module")
def queries(made):
    return made[0]


def brute_force_gold(graph, anchors_and_relations, answer_type):
    """Answer-type nodes linked to every anchor by the relation, read off the edge table (not the CSR)."""
    links = defaultdict(set)
    for s, d, r in zip(graph.src, graph.dst, graph.edge_rel):
        rel = graph.relation_names[r]
        links[(int(s), rel)].add(int(d))
        links[(int(d), rel)].add(int(s))
    typed = {v for v in range(graph.num_nodes) if graph.type_name(v) == answer_type}
    sets = [links[(a, rel)] & typed for a, rel in anchors_and_relations]
    return sorted(set.intersection(*sets))


RELATIONS = {  # template -> relation linking each anchor (in order) to the answer
    "gene_disease_process": ["associated with", "involved in"],
    "disease_phenotypes": ["phenotype present", "phenotype present", "inheritance"],
    "shared_phenotypes": ["phenotype present", "phenotype present", "is_a"],
    "gene_functions": ["enables"],
}


def test_gold_is_exact_and_the_textual_anchor_is_not_named(graph, queries):
    key_to_id = {k: i for i, k in enumerate(graph.key)}
    all_queries = [q for split in queries.values() for q in split]
    assert len(all_queries) >= 10
    assert len({q["meta"]["template"] for q in all_queries}) >= 3
    for q in all_queries:
        meta = q["meta"]
        anchors = [key_to_id[k] for k in meta["anchors"]]
        rels = RELATIONS[meta["template"]][: len(anchors)]
        assert q["answer_ids"] == brute_force_gold(graph, zip(anchors, rels), meta["answer_type"]), q["query"]
        assert CFG["min_answers"] <= len(q["answer_ids"]) <= CFG["max_answers"]
        label = str(graph.name[key_to_id[meta["textual_anchor"]]])
        assert label.lower() not in q["query"].lower(), q["query"]
        for v in q["answer_ids"]:
            assert not re.search(rf"(?<!\w){re.escape(str(graph.name[v]).lower())}(?!\w)", q["query"].lower())


def test_leaking_queries_are_caught_counted_and_replaced(graph, made):
    from ark.data.synthetic import SyntheticQueryMaker

    maker = SyntheticQueryMaker(graph, OmegaConf.create(CFG))
    q = next(q for split in made[0].values() for q in split)
    gold, anchor = q["answer_ids"], list(graph.key).index(q["meta"]["textual_anchor"])
    assert maker.leak(q["query"], gold, anchor) is None
    assert maker.leak(q["query"] + f" (e.g. {graph.name[gold[0]]})", gold, anchor) == "gold_name_in_text"
    assert maker.leak(q["query"] + f" also called {graph.name[anchor]}s", gold, anchor) is None  # not the phrase
    assert maker.leak(q["query"] + f", like {graph.name[anchor]}", gold, anchor) == "anchor_label_in_text"
    assert set(made[1]["dropped"]) <= {"gold_name_in_text", "anchor_label_in_text"}


def test_splits_hold_out_textual_anchors_and_are_seeded(graph, queries):
    anchors = {s: {q["meta"]["textual_anchor"] for q in qs} for s, qs in queries.items()}
    assert not anchors["train"] & anchors["test"] and not anchors["train"] & anchors["val"]
    assert make_synthetic_queries(graph, OmegaConf.create(CFG))[0] == queries
    other = make_synthetic_queries(graph, OmegaConf.create({**CFG, "seed": 4}))[0]
    assert other != queries
