"""STaRK loaders: QA files (real copies in ../shared) and SKB files (tiny fixtures written here)."""
import pickle

import numpy as np
import pytest

from ark.errors import UserError
import torch

from ark.data.queries import load_queries, write_query_splits
from ark.data.stark import load_stark_human_eval, load_stark_splits, stark_qa_dir
from ark.graph.stark import ensure_stark_files, load_stark_skb, merge_undirected

# ---------------------------------------------------------------- QA (real files)
SPLIT_SIZES = {
    "amazon": {"train": 5910, "val": 1548, "test": 1642},
    "mag": {"train": 7993, "val": 2665, "test": 2665},
    "prime": {"train": 6162, "val": 2241, "test": 2801},
}
HUMAN_SIZES = {"amazon": 81, "mag": 84, "prime": 109}  # git-history copy: PRIME's 109-row version


@pytest.fixture
def qa_root(shared_dir):
    root = shared_dir / "stark" / "git_history_f899c43parent" / "data"
    if not root.exists():
        pytest.skip(f"{root} not present")
    return root


@pytest.mark.parametrize("name", ["amazon", "mag", "prime"])
def test_qa_split_and_human_sizes(qa_root, name):
    qa_dir = stark_qa_dir(qa_root, name)
    splits = load_stark_splits(qa_dir)
    assert {s: len(q) for s, q in splits.items()} == SPLIT_SIZES[name]
    assert len(load_stark_human_eval(qa_dir)) == HUMAN_SIZES[name]
    ids = [q["id"] for qs in splits.values() for q in qs]
    assert len(ids) == len(set(ids))
    q = splits["test"][0]
    assert set(q) == {"id", "query", "answer_ids"} and isinstance(q["id"], str)
    assert q["answer_ids"] and all(isinstance(a, int) for a in q["answer_ids"])


def test_prime_answer_ids_deduplicated(qa_root, tmp_path):
    qa_dir = stark_qa_dir(qa_root, "prime")
    assert qa_dir.name == "primekg"
    splits = load_stark_splits(qa_dir)
    q = next(q for q in splits["test"] if q["id"] == "10049")
    assert q["answer_ids"] == [63273, 63376, 64545, 129373]
    for qs in splits.values():
        assert all(len(q["answer_ids"]) == len(set(q["answer_ids"])) for q in qs)
    counts = write_query_splits(splits, tmp_path / "out")
    assert counts == {k: len(v) for k, v in splits.items()}
    assert load_queries(tmp_path / "out", "test") == splits["test"]
    assert not list((tmp_path / "out").glob("*.tmp"))


# ---------------------------------------------------------------- SKB fixtures in STaRK's file format
def write_skb(folder, node_info, node_types, node_type_dict, edges, edge_type_dict, dicts=True):
    """Write the six STaRK files; edges = [(src, dst, type), ...]."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "node_info.pkl", "wb") as f:
        pickle.dump(node_info, f)
    torch.save(torch.LongTensor(node_types), folder / "node_types.pt")
    torch.save(torch.LongTensor([[e[0] for e in edges], [e[1] for e in edges]]), folder / "edge_index.pt")
    torch.save(torch.LongTensor([e[2] for e in edges]), folder / "edge_types.pt")
    if dicts:
        for stem, d in (("node_type_dict", node_type_dict), ("edge_type_dict", edge_type_dict)):
            with open(folder / f"{stem}.pkl", "wb") as f:
                pickle.dump(d, f)


PRIME_TYPES = ["disease", "gene/protein", "molecular_function", "drug", "pathway", "anatomy",
               "effect/phenotype", "biological_process", "cellular_component", "exposure"]
PRIME_RELATIONS = ["ppi", "carrier", "enzyme", "target", "transporter", "contraindication", "indication",
                   "off-label use", "synergistic interaction", "associated with", "parent-child",
                   "phenotype absent", "phenotype present", "side effect", "interacts with", "linked to",
                   "expression present", "expression absent"]


# three PRIME nodes with the detail fields its documents render or skip (also read by tests/test_stark_parity.py)
PRIME_NODES = {
    0: {"id": "1234", "type": "disease", "name": "asthma", "source": "MONDO",
        "details": {"mondo_definition": "a lung disease", "_hidden": "x", "umls_id": "C1",
                    "mayo_symptoms": "nan", "orphanet_prevalence": ""}},
    1: {"id": "5243", "type": "gene/protein", "name": "ABCB1", "source": "NCBI",
        "details": {"summary": "a transporter", "generif": [{"text": "binds drugs"}, {"text": "in gut"}],
                    "interpro": {"desc": "ABC transporter"}, "genomic_pos": [{"chr": "7"}, {"chr": "X"}],
                    "query": "ABCB1"}},
    2: {"id": "DB00001", "type": "drug", "name": "lepirudin", "source": "DrugBank", "details": {}},
}


def write_prime(root):
    node_info = {**PRIME_NODES, 3: {"id": "DB00002", "type": "drug", "name": "cetuximab", "source": "DrugBank"}}
    # already symmetric: (0,1) associated with, (1,2) transporter, (2,3) synergistic interaction
    edges = [(0, 1, 9), (1, 0, 9), (1, 2, 4), (2, 1, 4), (2, 3, 8), (3, 2, 8)]
    write_skb(root / "prime" / "processed", node_info, [0, 1, 3, 3], dict(enumerate(PRIME_TYPES)), edges,
              dict(enumerate(PRIME_RELATIONS)))


def write_mag(root):
    def paper(title, **extra):
        row = {"title": title, "abstract": "We study graphs.\r\n", "Date": -1, "OriginalVenue": -1,
               "JournalDisplayName": -1, "ConferenceSeriesDisplayName": -1,
               "ConferenceInstancesDisplayName": -1, "mag_id": 7, "type": "paper"}
        return {**row, **extra}

    node_info = {
        0: {"DisplayName": "Ada Lovelace", "PaperCount": 12, "CitationCount": -1, "mag_id": 1, "type": "author"},
        1: {"DisplayName": "Stanford University", "PaperCount": -1, "CitationCount": 90, "type": "institution"},
        2: {"DisplayName": "graph theory", "PaperCount": 5, "CitationCount": 8, "type": "field_of_study"},
        3: paper("Graphs I", Date="2019-03-22", JournalDisplayName="J. Graphs"),
        4: paper("Graphs II", OriginalVenue="KDD", JournalDisplayName="J. Graphs"),
    }
    # directed, as STaRK stores MAG; the dict files are absent (MagSKB has fixed dicts)
    edges = [(0, 1, 0), (0, 3, 3), (0, 4, 3), (3, 2, 2), (4, 3, 1)]
    write_skb(root / "mag" / "processed", node_info, [0, 1, 2, 3, 3], None, edges, None, dicts=False)


def write_amazon(root):
    product = {
        "title": "Trail Tent", "brand": "Acme", "asin": "B01", "global_category": "Sports and Outdoors",
        "category": ["Camping"], "price": "$99", "rank": "1",
        "feature": ["Waterproof", "", "ASIN: B01", "Two doors"],
        "description": ["A light tent.", "Sets up fast. "],
        "details": {"product_dimensions": "80 x 60 x 40 inches ; 4 pounds"},
        "review": [{"summary": "ok", "reviewText": "fine", "vote": "3"},
                   {"summary": "meh", "reviewText": "so so", "vote": None},
                   {"summary": "great", "reviewText": "love it", "vote": "1,200"}],
        "qa": [{"question": "Rain?", "answer": "Yes"}],
    }
    node_info = {
        0: product,
        1: {"title": "Camp Stove", "feature": [], "description": [], "review": [], "qa": []},
        2: {"brand_name": "Acme"},
        3: {"category_name": "Camping"},
        4: {"color_name": "green"},
    }
    node_type_dict = {0: "product", 1: "brand", 2: "category", 3: "color"}
    edge_type_dict = {0: "also_buy", 1: "also_view", 2: "has_brand", 3: "has_category", 4: "has_color"}
    # directed; pair (0,1) has also_buy and also_view -> mean 0.5 -> also_buy
    edges = [(0, 1, 0), (0, 1, 1), (0, 2, 2), (0, 3, 3), (0, 4, 4), (1, 3, 3)]
    write_skb(root / "amazon" / "processed" / "cache" / "brand-category-color", node_info,
              [0, 0, 1, 2, 3], node_type_dict, edges, edge_type_dict)


def edge_set(graph):
    return {(int(u), int(v), graph.relation_names[r]) for u, v, r in zip(graph.src, graph.dst, graph.edge_rel)}


def neighbor_set(graph, v):
    s = graph.neighbors(v)
    return {(int(u), graph.relation_names[r]) for u, r in zip(graph.nbr[s], graph.rel[s])}


# ---------------------------------------------------------------- undirected merge
def test_merge_symmetrises_and_truncates_mean():
    src, dst, rel, merged = merge_undirected([0, 2, 1, 3, 4, 4, 3], [1, 1, 2, 4, 3, 3, 3], [5, 1, 2, 0, 3, 3, 7], 5)
    assert merged
    got = {(int(u), int(v)): int(t) for u, v, t in zip(src, dst, rel)}
    # (0,1) one arc; {1,2} types 1,2 -> 1.5 -> 1; {3,4} types 0,3,3 -> 2; self loop (3,3) kept once
    assert got == {(0, 1): 5, (1, 2): 1, (3, 4): 2, (3, 3): 7}


def test_merge_leaves_symmetric_input():
    src, dst, rel, merged = merge_undirected([0, 1, 1, 2, 1, 0], [1, 0, 2, 1, 0, 1], [3, 3, 4, 4, 6, 6], 3)
    assert not merged
    assert sorted(zip(src.tolist(), dst.tolist(), rel.tolist())) == [(0, 1, 3), (0, 1, 6), (1, 2, 4)]


# ---------------------------------------------------------------- loaders
def test_prime_skb(tmp_path):
    write_prime(tmp_path)
    g = load_stark_skb("PRIME", tmp_path)
    assert g.node_type_names == PRIME_TYPES and g.relation_names == PRIME_RELATIONS
    assert [g.type_name(v) for v in range(4)] == ["disease", "gene/protein", "drug", "drug"]
    assert g.meta["undirected_merge"] == "input already undirected" and g.meta["stark_num_arcs"] == 6
    assert edge_set(g) == {(0, 1, "associated with"), (1, 2, "transporter"), (2, 3, "synergistic interaction")}
    assert neighbor_set(g, 1) == {(0, "associated with"), (2, "transporter")}
    assert g.candidate_ids().tolist() == [0, 1, 2, 3]
    assert list(g.key) == ["0", "1", "2", "3"] and g.name[1] == "ABCB1"
    assert g.doc[0] == "- name: asthma\n- type: disease\n- source: MONDO\n- details:\n  - mondo_definition: a lung disease\n"
    assert g.doc[1] == (
        "- name: ABCB1\n- type: gene/protein\n- source: NCBI\n- details:\n"
        "  - summary (protein summary text): a transporter\n"
        "  - generif (PubMed text): binds drugs; in gut\n"
        "  - interpro (protein family and classification information): ['ABC transporter']\n"
        "  - genomic_pos (genomic position): {'chr': '7'}\n"
        "  - query: ABCB1\n"
    )
    assert g.doc[2] == "- name: lepirudin\n- type: drug\n- source: DrugBank\n"  # empty details: no section
    assert g.node_fields(0)["details"] == {"mondo_definition": "a lung disease", "_hidden": "x", "umls_id": "C1"}

    with_rel = load_stark_skb("prime", tmp_path, relations=True)
    assert with_rel.doc[1] == g.doc[1] + (
        "- relations:\n  transporter: {drug: (lepirudin),}\n  associated_with: {disease: (asthma),}"
    )


def test_mag_skb(tmp_path):
    write_mag(tmp_path)
    g = load_stark_skb("mag", tmp_path / "mag")  # the SKB folder itself works too
    assert g.node_type_names == ["author", "institution", "field_of_study", "paper"]
    assert g.meta["undirected_merge"] == "applied" and g.meta["stark_num_arcs"] == 10
    assert edge_set(g) == {
        (0, 1, "author___affiliated_with___institution"), (0, 3, "author___writes___paper"),
        (0, 4, "author___writes___paper"), (2, 3, "paper___has_topic___field_of_study"),
        (3, 4, "paper___cites___paper"),
    }
    assert neighbor_set(g, 3) == {(0, "author___writes___paper"), (2, "paper___has_topic___field_of_study"),
                                  (4, "paper___cites___paper")}
    assert g.candidate_ids().tolist() == [3, 4]
    assert list(g.name) == ["Ada Lovelace", "Stanford University", "graph theory", "Graphs I", "Graphs II"]
    assert g.doc[0] == "- author name: Ada Lovelace\n- author paper count: 12\n"
    assert g.doc[1] == " - institution: Stanford University\n- institution citation count: 90\n"
    assert g.doc[2] == " - field of study: graph theory\n- field paper count: 5\n- field citation count: 8\n"
    assert g.doc[3] == (" - paper title: Graphs I\n - abstract: We study graphs.\n"
                        " - publication date: 2019-03-22\n - journal: J. Graphs\n")
    assert g.doc[4] == " - paper title: Graphs II\n - abstract: We study graphs.\n - venue: KDD\n"
    assert "Date" not in g.node_fields(4) and g.node_fields(4)["OriginalVenue"] == "KDD"

    with_rel = load_stark_skb("mag", tmp_path, relations=True)
    assert with_rel.doc[3] == g.doc[3] + (
        '- relations:\n\npaper cites paper: ("Graphs II"),\npaper has_topic field_of_study: (graph theory),'
        "\nauthor writes paper: (Ada Lovelace (Stanford University)),"
    )
    assert with_rel.doc[0] == g.doc[0]  # STaRK adds relations to papers only


def test_mag_unknown_values():
    from ark.graph.stark_documents import mag_doc

    doc = mag_doc({"DisplayName": -1, "PaperCount": -1, "CitationCount": 3}, "author")
    assert doc == "- author name: Unknown\n- author citation count: 3\n"


def test_amazon_skb(tmp_path):
    write_amazon(tmp_path)
    g = load_stark_skb("amazon", tmp_path)
    assert g.node_type_names == ["product", "brand", "category", "color"]
    assert g.meta["undirected_merge"] == "applied"
    assert edge_set(g) == {(0, 1, "also_buy"), (0, 2, "has_brand"), (0, 3, "has_category"),
                           (0, 4, "has_color"), (1, 3, "has_category")}
    assert neighbor_set(g, 1) == {(0, "also_buy"), (3, "has_category")}
    assert g.candidate_ids().tolist() == [0, 1]
    assert list(g.name) == ["Trail Tent", "Camp Stove", "Acme", "Camping", "green"]
    assert g.doc[0] == (
        "- product: Trail Tent\n- brand: Acme\n- dimensions: 80 x 60 x 40 inches\n- weight: 4 pounds\n"
        "- description: A light tent. Sets up fast.\n"
        "- features: \n#1: Waterproof\n#4: Two doors\n"
        '- reviews: \n#3:\nsummary: great\ntext: "love it"\n#1:\nsummary: ok\ntext: "fine"\n'
        '#2:\nsummary: meh\ntext: "so so"\n'
        '- Q&A: \n#1:\nquestion: "Rain?"\nanswer: "Yes"\n'
    )
    assert g.doc[1] == "- product: Camp Stove\n"
    assert [g.doc[v] for v in (2, 3, 4)] == ["brand name: Acme", "category name: Camping", "color name: green"]
    assert "review" not in g.node_fields(0) and g.node_fields(0)["asin"] == "B01"

    with_rel = load_stark_skb("amazon", tmp_path, relations=True)
    assert with_rel.doc[0] == g.doc[0] + "- relations:\n  products also purchased: \n#1: Camp Stove\n  brand: Acme\n"
    assert with_rel.doc[2] == g.doc[2]


def test_graph_round_trip(tmp_path):
    from ark.graph.graph import Graph

    write_mag(tmp_path)
    g = load_stark_skb("mag", tmp_path)
    g.save(tmp_path / "saved")
    h = Graph.load(tmp_path / "saved")
    assert h.meta["candidate_types"] == ["paper"] and h.candidate_ids().tolist() == [3, 4]
    assert list(h.doc) == list(g.doc) and np.array_equal(h.nbr, g.nbr)


@pytest.mark.parametrize("missing", ["edge_types.pt", "node_info.pkl", "edge_type_dict.pkl"])
def test_missing_file_is_a_clear_error(tmp_path, missing):
    write_prime(tmp_path)
    (tmp_path / "prime" / "processed" / missing).unlink()
    with pytest.raises(UserError, match=missing.replace(".", r"\.")) as error:
        load_stark_skb("prime", tmp_path)
    assert "skb/prime/processed.zip" in str(error.value)
    with pytest.raises(UserError, match=missing.replace(".", r"\.")):
        ensure_stark_files("prime", tmp_path, online=False)


def test_nothing_there_names_first_file(tmp_path):
    with pytest.raises(UserError, match=r"brand-category-color/node_info\.pkl"):
        ensure_stark_files("amazon", tmp_path, online=False)
