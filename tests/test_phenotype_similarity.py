"""The phenotype-similarity baseline (ark.graph.phenotype_similarity) on a hand-made HPO fragment."""
import math

import pytest

from ark.graph import Graph
from ark.graph.phenotype_similarity import PhenotypeSimilarity

# nodes: 0 root, 1 limb, 2 hand, 3 thumb, 4 heart, 5 septum | 6 D1, 7 D2, 8 D3 | 9 G1, 10 G2
KEYS = ["HP:0000001", "HP:0000002", "HP:0000003", "HP:0000004", "HP:0000005", "HP:0000006",
        "OMIM:1", "OMIM:2", "OMIM:3", "G1", "G2"]
IS_A = [(1, 0), (2, 1), (3, 2), (4, 0), (5, 4)]
PRESENT = [(6, 3), (6, 5), (7, 2), (8, 5)]  # D1: thumb + septum, D2: hand, D3: septum
GENES = [(9, 6), (10, 8)]  # G1 -> D1, G2 -> D3


def graph() -> Graph:
    edges = [(s, d, 0) for s, d in IS_A] + [(s, d, 1) for s, d in PRESENT] + [(s, d, 2) for s, d in GENES]
    types = [2] * 6 + [0] * 3 + [1] * 2
    return Graph.from_tables(["disease", "gene/protein", "effect/phenotype"], ["is_a", "phenotype present",
                             "associated with"], types, KEYS, KEYS, [{}] * len(KEYS), [e[0] for e in edges],
                             [e[1] for e in edges], [e[2] for e in edges])


def test_information_content_and_ranking():
    s = PhenotypeSimilarity(graph())
    # annotated diseases: 3; "hand" is in D1's and D2's closures, "thumb" in D1's only, the root in all
    assert s.ic[0] == 0 and s.ic[2] == pytest.approx(math.log(3 / 2)) and s.ic[3] == pytest.approx(math.log(3))
    ids, scores = s.rank(["HP:0000004"], "disease", 10)  # the thumb: D1 shares it, D2 only its parent "hand"
    assert ids == [6, 7] and scores == [round(math.log(3), 4), round(math.log(3 / 2), 4)]
    ids, _ = s.rank(["HP:0000004", "HP:0000006", "HP:9999999"], "disease", 10)  # an unknown term counts for nothing
    assert ids[0] == 6
    ids, _ = s.rank(["HP:0000006"], "disease", 1)  # the septum: D1 and D3 tie, the smaller id first; depth 1
    assert ids == [6]


def test_genes_take_their_best_disease_and_nothing_is_ranked_without_a_shared_term():
    s = PhenotypeSimilarity(graph())
    ids, scores = s.rank(["HP:0000006"], "gene", 10)
    assert ids == [9, 10] and scores[0] == scores[1] > 0
    assert s.rank(["HP:0000001"], "disease", 10) == ([], [])  # only the root in common: information 0
    assert s.rank([], "gene", 10) == ([], [])


def test_the_stage_ranks_only_the_cases_of_a_phenopacket_query_set(tiny_project):
    from ark.errors import UserError
    from ark.stages import hpo_baseline
    from tests.conftest import compose_cfg

    with pytest.raises(UserError, match="phenopacket query set"):
        hpo_baseline.run(compose_cfg(tiny_project))  # queries=synthetic: no case file to read terms from


def test_its_runs_are_named_and_tagged_as_hpo():
    from ark.build import spec
    from ark.runs.store import Run
    from ark.tracking import run_labels
    from tests.conftest import compose_cfg

    cfg = compose_cfg(["dataset=biokg_lpo", "queries=phenopackets_gene"])
    name, tags = run_labels({}, "hpo_baseline", Run(spec(cfg), "hpo_baseline"))  # as the stage starts its W&B run
    assert name.startswith("biokg_lpo-phenopackets_gene-test-hpo-") and tags[-1] == "hpo_baseline"
