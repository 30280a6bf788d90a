import functools
import gzip
import http.server
import itertools
import json
import threading

import pytest

from ark.data.phenopackets import (
    SKIP_REASONS,
    make_phenopacket_queries,
    read_phenopackets,
    render_query,
    source_identity,
    split_of,
)
from ark.errors import UserError
from ark.graph.graph import Graph

TYPES = ["disease", "gene/protein", "effect/phenotype"]
NODES = [  # (type, key, name)
    ("effect/phenotype", "HP:0000001", "Seizure"),
    ("effect/phenotype", "HP:0000002", "Short stature"),
    ("effect/phenotype", "HP:0000003", "Hearing loss"),
    ("effect/phenotype", "HP:0000004", "Cleft palate"),
    ("disease", "OMIM:100001", "Alpha syndrome"),
    ("disease", "OMIM:100002", "Beta syndrome"),
    ("gene/protein", "NCBIGene:11", "GENEA"),
]
NODE = {key: i for i, (_, key, _) in enumerate(NODES)}


@pytest.fixture
def graph():
    return Graph.from_tables(
        node_type_names=TYPES,
        relation_names=["phenotype present"],
        node_type=[TYPES.index(t) for t, _, _ in NODES],
        key=[k for _, k, _ in NODES],
        name=[n for _, _, n in NODES],
        fields=[{}] * len(NODES),
        src=[NODE["OMIM:100001"]],
        dst=[NODE["HP:0000001"]],
        edge_rel=[0],
    )


def packet(case_id, disease="OMIM:100001", present=(), excluded=(), sex=None, gene=None, pmid=None, via_diseases=False):
    """A minimal phenopacket; labels in the packet are deliberately wrong (the graph's are used)."""
    features = [{"type": {"id": t, "label": "packet label"}} for t in present]
    features += [{"type": {"id": t, "label": "packet label"}, "excluded": True} for t in excluded]
    p = {"id": case_id, "subject": {"id": case_id}, "phenotypicFeatures": features}
    if sex:
        p["subject"]["sex"] = sex
    diagnosis = {}
    if disease and not via_diseases:
        diagnosis["disease"] = {"id": disease, "label": "x"}
    if gene:
        gi = {"variantInterpretation": {"variationDescriptor": {"geneContext": {"valueId": "HGNC:1", "symbol": gene}}}}
        diagnosis["genomicInterpretations"] = [gi]
    if diagnosis:
        p["interpretations"] = [{"id": case_id, "diagnosis": diagnosis}]
    if disease and via_diseases:
        p["diseases"] = [{"term": {"id": disease, "label": "x"}}]
    if pmid:
        p["metaData"] = {"externalReferences": [{"id": pmid}]}
    return p


def write_jsonl(path, packets, gz=False):
    text = "".join(json.dumps(p) + "\n" for p in packets)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def only_query(splits):
    queries = [q for qs in splits.values() for q in qs]
    assert len(queries) == 1
    return queries[0]


# ---------------------------------------------------------------- reading


@pytest.mark.parametrize("gz", [False, True])
def test_read_plain_and_gzipped(tmp_path, gz):
    packets = [packet("a", present=["HP:0000001"]), packet("b", present=["HP:0000002"])]
    path = write_jsonl(tmp_path / "cases.data", packets, gz=gz)  # no .gz suffix: detected by magic bytes
    assert list(read_phenopackets(path)) == packets
    assert list(read_phenopackets(str(path))) == packets


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_line_names_file_and_line(tmp_path, gz):
    lines = [json.dumps(packet("a")), json.dumps(packet("b"))[:25]]
    path = tmp_path / ("cut.jsonl.gz" if gz else "cut.jsonl")
    text = "\n".join(lines) + "\n"
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    with pytest.raises(ValueError, match=r"cut\.jsonl(\.gz)?, line 2: not valid JSON"):
        list(read_phenopackets(path))


def test_truncated_gzip_stream(tmp_path):
    data = gzip.compress("".join(json.dumps(packet(str(i))) + "\n" for i in range(50)).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.jsonl\.gz.*truncated"):
        list(read_phenopackets(path))


def test_read_from_url(tmp_path):
    packets = [packet("a", present=["HP:0000001"])]
    write_jsonl(tmp_path / "cases.jsonl.gz", packets, gz=True)
    handler = functools.partial(QuietHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/cases.jsonl.gz"
        assert list(read_phenopackets(url)) == packets
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.parametrize("gz", [False, True])
def test_read_one_pretty_printed_ga4gh_json(tmp_path, gz):
    p = packet("a", present=["HP:0000001"], excluded=["HP:0000002"], pmid="PMID:1")
    text = json.dumps(p, indent=2) + "\n"
    path = tmp_path / "case.json"
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    assert list(read_phenopackets(path)) == [p]


def test_read_a_directory_of_json_and_jsonl_files_in_name_order(tmp_path):
    (tmp_path / "b.json").write_text(json.dumps(packet("b"), indent=2))
    write_jsonl(tmp_path / "a.jsonl", [packet("a1"), packet("a2")])
    (tmp_path / "c.json").write_text(json.dumps(packet("c")))  # one line, compact
    write_jsonl(tmp_path / "d.jsonl.gz", [packet("d")], gz=True)
    (tmp_path / "notes.txt").write_text("not a phenopacket")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "e.json").write_text(json.dumps(packet("e")))  # subdirectories are not read
    assert [p["id"] for p in read_phenopackets(tmp_path)] == ["a1", "a2", "b", "c", "d"]

    identity = source_identity(tmp_path)  # what a query set records of its source: the name and the content read
    assert identity == source_identity(str(tmp_path)) and identity["file"] == tmp_path.name
    (tmp_path / "notes.txt").write_text("changed, not read")
    assert source_identity(tmp_path) == identity
    (tmp_path / "c.json").write_text(json.dumps(packet("c2")))
    assert source_identity(tmp_path)["sha256"] != identity["sha256"]


def test_a_bad_json_file_is_one_line_naming_the_file_and_line(tmp_path):
    text = json.dumps(packet("a", present=["HP:0000001"]), indent=2)
    (tmp_path / "a.json").write_text(json.dumps(packet("ok")))
    (tmp_path / "b.json").write_text(text[:-20])  # truncated
    with pytest.raises(UserError, match=r"b\.json, line \d+: not valid JSON \(.* at column \d+\); truncated") as e:
        list(read_phenopackets(tmp_path))
    assert str(tmp_path / "b.json") in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "b.json").write_text(f"[\n{text}\n]\n")  # a list of packets: not one GA4GH phenopacket
    with pytest.raises(UserError, match=r"b\.json: expected a JSON object \(one phenopacket\), got list"):
        list(read_phenopackets(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"empty: a directory without phenopacket files \(\*\.json, \*\.jsonl"):
        list(read_phenopackets(tmp_path / "empty"))


# ---------------------------------------------------------------- rendering and gold


def test_render_with_sex_excluded_and_graph_labels(graph):
    p = packet(
        "c1",
        present=["HP:0000001", "HP:9999999", "HP:0000002", "HP:0000001"],  # unknown term dropped, repeat once
        excluded=["HP:0000003", "HP:8888888"],
        sex="FEMALE",
    )
    q = only_query(make_phenopacket_queries(graph, [p])[0])
    assert q["query"] == (
        "A female patient presents with Seizure, Short stature. Not observed: Hearing loss. "
        "Which disease best explains these findings?"
    )
    assert q["answer_ids"] == [NODE["OMIM:100001"]]
    assert q["id"] == "c1"
    assert q["meta"] == {"pmid": "c1", "disease": "OMIM:100001", "genes": []}


def test_render_without_sex_or_excluded_in_graph(graph):
    p = packet("c1", present=["HP:0000004"], excluded=["HP:7777777"], sex="UNKNOWN_SEX", pmid="PMID:42")
    q = only_query(make_phenopacket_queries(graph, [p])[0])
    assert q["query"] == "A patient presents with Cleft palate. Which disease best explains these findings?"
    assert q["meta"]["pmid"] == "PMID:42"


def test_male_and_two_excluded(graph):
    p = packet("c1", present=["HP:0000001"], excluded=["HP:0000002", "HP:0000003"], sex="MALE")
    q = only_query(make_phenopacket_queries(graph, [p])[0])
    assert q["query"].startswith("A male patient presents with Seizure. Not observed: Short stature, Hearing loss.")


def test_at_most_ten_excluded_labels():
    text = render_query(["A", "B"], [f"x{i}" for i in range(12)], None, target="gene")
    assert text == (
        "A patient presents with A, B. Not observed: x0, x1, x2, x3, x4, x5, x6, x7, x8, x9. "
        "Which gene is most likely causal for these findings?"
    )


def test_disease_fallback_to_diseases_list(graph):
    p = packet("c1", disease="OMIM:100002", present=["HP:0000001"], via_diseases=True)
    q = only_query(make_phenopacket_queries(graph, [p])[0])
    assert q["answer_ids"] == [NODE["OMIM:100002"]]


def test_gene_target(graph):
    packets = [
        packet("g1", present=["HP:0000001"], gene="GENEA"),
        packet("g2", present=["HP:0000001"], gene="NOTINGRAPH"),
        packet("g3", present=["HP:0000001"]),
    ]
    splits, counts = make_phenopacket_queries(graph, packets, target="gene")
    q = only_query(splits)
    assert q["id"] == "g1"
    assert q["answer_ids"] == [NODE["NCBIGene:11"]]
    assert q["meta"]["genes"] == ["GENEA"]
    assert q["query"].endswith("Which gene is most likely causal for these findings?")
    assert counts["gene_not_in_graph"] == 1 and counts["no_gene"] == 1 and counts["kept"] == 1


def test_gene_from_gene_descriptor(graph):
    p = packet("g1", present=["HP:0000001"])
    p["interpretations"][0]["diagnosis"]["genomicInterpretations"] = [{"gene": {"valueId": "HGNC:1", "symbol": "GENEA"}}]
    q = only_query(make_phenopacket_queries(graph, [p], target="gene")[0])
    assert q["answer_ids"] == [NODE["NCBIGene:11"]]


def test_unknown_target(graph):
    with pytest.raises(ValueError, match="target"):
        make_phenopacket_queries(graph, [], target="drug")


# ---------------------------------------------------------------- cap, skip counts, splits


def test_cap_keeps_first_cases_by_id_and_counts_skips(graph):
    usable = [packet(f"case_{i}", present=["HP:0000001"]) for i in (3, 1, 4, 0, 2)]  # 5 cases, one disease
    unusable = [
        packet("x1", disease=None, present=["HP:0000001"]),
        packet("x2", disease="OMIM:999999", present=["HP:0000001"]),
        packet("x3", present=[]),
        packet("x4", present=["HP:5555555"], excluded=["HP:0000001"]),
        packet("case_1", disease="OMIM:100002", present=["HP:0000002"]),  # same id again
    ]
    splits, counts = make_phenopacket_queries(graph, usable + unusable, cap_per_disease=2)
    kept = sorted(q["id"] for qs in splits.values() for q in qs)
    assert kept == ["case_0", "case_1"]
    assert counts == {
        "read": 10,
        "kept": 2,
        "duplicate_id": 1,
        "no_disease": 1,
        "disease_not_in_graph": 1,
        "no_gene": 0,
        "gene_not_in_graph": 0,
        "no_present_terms": 1,
        "no_present_terms_in_graph": 1,
        "over_cap": 3,
    }
    assert counts["read"] == counts["kept"] + sum(counts[r] for r in SKIP_REASONS)
    _, uncapped = make_phenopacket_queries(graph, usable, cap_per_disease=None)
    assert uncapped["kept"] == 5


def test_splits_are_pmid_disjoint_and_deterministic(graph):
    packets = [
        packet(f"PMID_{i % 40}_{i}", disease=("OMIM:100001", "OMIM:100002")[i % 2], present=["HP:0000001"], pmid=f"PMID:{i % 40}")
        for i in range(400)
    ]
    splits, counts = make_phenopacket_queries(graph, packets, cap_per_disease=None)
    assert counts["kept"] == 400
    pmids = {s: {q["meta"]["pmid"] for q in qs} for s, qs in splits.items()}
    assert not pmids["train"] & pmids["val"] and not pmids["train"] & pmids["test"] and not pmids["val"] & pmids["test"]
    assert all(pmids[s] for s in ("train", "val", "test"))
    for s, qs in splits.items():
        assert all(split_of(q["meta"]["pmid"]) == s for q in qs)
    again, _ = make_phenopacket_queries(graph, reversed(packets), cap_per_disease=None)
    assert again == splits


def test_split_fractions():
    names = [split_of(f"PMID:{i}") for i in range(5000)]
    share = {s: names.count(s) / len(names) for s in ("train", "val", "test")}
    assert share["train"] == pytest.approx(0.6, abs=0.03)
    assert share["val"] == pytest.approx(0.2, abs=0.03)
    assert {split_of(f"PMID:{i}", (1.0, 0.0, 0.0)) for i in range(100)} == {"train"}


# ---------------------------------------------------------------- the real file


def test_real_file_first_200(shared_dir):
    path = shared_dir / "data/phenopackets/phenopacket-store-0.1.24.dev.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} not present")
    packets = list(itertools.islice(read_phenopackets(path), 200))
    assert len(packets) == 200
    assert all(isinstance(p.get("id"), str) and p["id"] for p in packets)

    # a graph holding every term and disease of these packets: each case is kept or counted
    keys = {}
    for p in packets:
        for f in p.get("phenotypicFeatures") or []:
            keys[f["type"]["id"]] = ("effect/phenotype", f["type"].get("label", ""))
        for interp in p.get("interpretations") or []:
            d = interp["diagnosis"]["disease"]
            keys[d["id"]] = ("disease", d.get("label", ""))
    g = Graph.from_tables(
        node_type_names=TYPES,
        relation_names=[],
        node_type=[TYPES.index(t) for t, _ in keys.values()],
        key=list(keys),
        name=[n for _, n in keys.values()],
        fields=[{}] * len(keys),
        src=[],
        dst=[],
        edge_rel=[],
    )
    splits, counts = make_phenopacket_queries(g, packets, cap_per_disease=None)
    without_features = sum(1 for p in packets if not any(not f.get("excluded") for f in p.get("phenotypicFeatures") or []))
    assert counts["read"] == 200
    assert counts["no_present_terms"] == without_features
    assert counts["kept"] == 200 - sum(counts[r] for r in SKIP_REASONS)
    assert counts["kept"] >= 190
    assert all(q["query"].startswith(("A female patient", "A male patient", "A patient")) for qs in splits.values() for q in qs)


# ---------------------------------------------------------------- answerable cases, and the split a graph was cut for
def _answerable_graph():
    """P: a phenotype; A: a disease annotated with P; B: a disease without annotations; G1, G2: their genes."""
    types = ["disease", "gene/protein", "effect/phenotype"]
    nodes = [("effect/phenotype", "P"), ("disease", "A"), ("disease", "B"), ("gene/protein", "G1"),
             ("gene/protein", "G2")]
    return Graph.from_tables(node_type_names=types, relation_names=["phenotype present", "associated with"],
                             node_type=[types.index(t) for t, _ in nodes], key=[k for _, k in nodes],
                             name=[k for _, k in nodes], fields=[{}] * len(nodes),
                             src=[1, 3, 4], dst=[0, 1, 2], edge_rel=[0, 1, 1])


def test_a_case_is_answerable_when_its_gold_disease_keeps_a_phenotype():
    from ark.data.phenopackets import PhenopacketQueries

    g = _answerable_graph()
    disease = PhenopacketQueries(name="phenopackets", source="x", target="disease")
    assert disease.answerable(g, [1]) and not disease.answerable(g, [2]) and disease.answerable(g, [2, 1])
    gene = PhenopacketQueries(name="phenopackets_gene", source="x", target="gene")
    assert gene.answerable(g, [3]) and not gene.answerable(g, [4])  # G2's only disease, B, has no phenotype


def test_metrics_on_the_answerable_subset_sit_beside_the_whole_split():
    from ark.agent.records import QueryRecord
    from ark.eval.score import score_records

    records = [QueryRecord(id=i, query="q", ranking=r) for i, r in (("a", [1]), ("b", [2]), ("c", [5]))]
    gold = {"a": [1], "b": [9], "c": [5]}
    rows, metrics = score_records(records, gold, ["hit@1"], answerable={"a": True, "b": True, "c": False})
    assert [r["answerable"] for r in rows] == [True, True, False]
    assert metrics["hit@1"] == pytest.approx(2 / 3) and metrics["answerable/hit@1"] == 0.5
    assert metrics["n_answerable"] == 2 and metrics["n_queries"] == 3
    assert "n_answerable" not in score_records(records, gold, ["hit@1"])[1]  # a query set without the notion


def test_a_graph_cut_for_the_test_cases_refuses_the_validation_split(tmp_path):
    from ark import build
    from ark.data.phenopackets import source_identity
    from ark.errors import UserError
    from tests.conftest import compose_cfg

    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(packet("c1", pmid="PMID:1")) + "\n")
    g = _answerable_graph()
    g.meta["excluded"] = {"source": {**source_identity(cases), "splits": ["test"], "split_fractions": [0.6, 0.2, 0.2]}}
    base = ["queries=phenopackets", f"queries.source={cases}", f"paths.data={tmp_path}/data"]
    with pytest.raises(UserError, match="test cases .* not those of split=val"):
        build.queries(build.spec(compose_cfg(base + ["split=val"])), g)
    with pytest.raises(UserError, match="not those of split=test with queries.split_fractions"):
        build.queries(build.spec(compose_cfg(base + ["split=test", "queries.split_fractions=[0.5,0.25,0.25]"])), g)
    with pytest.raises(UserError, match="no queries|no query file|not found|No such"):  # the cut fits: on to the file
        build.queries(build.spec(compose_cfg(base + ["split=test"])), g)
    # label-free collection of training trajectories on the graph cut for the test cases: the split is not refused
    with pytest.raises(UserError, match="no queries|no query file|not found|No such"):
        build.queries(build.spec(compose_cfg(base + ["split=train"])), g, labels=False)
    with pytest.raises(UserError, match="not those of split=train with queries.split_fractions"):  # but its cut is
        build.queries(build.spec(compose_cfg(base + ["split=train", "queries.split_fractions=[0.5,0.25,0.25]"])), g,
                      labels=False)


def test_the_lpo_table_counts_the_answerable_cases_of_the_split_each_graph_was_cut_for(tmp_path):
    from ark.io import write_jsonl
    from ark.report.tables.data_tables import table_lpo

    full, cut = _answerable_graph(), _answerable_graph()
    cut.meta["excluded"] = {"source": {"file": "x", "sha256": "y", "splits": ["test"]}, "publications": 3,
                            "annotations_removed": 4, "diseases_left_without_phenotypes": 1}
    for q, rows in (("phenopackets", [[1], [2]]), ("phenopackets_gene", [[3], [4], [4]])):
        write_jsonl(tmp_path / q / "test.jsonl", [{"id": str(i), "query": "q", "answer_ids": a}
                                                  for i, a in enumerate(rows)])
    t = table_lpo({"full": full, "cut": cut}, tmp_path, ["synthetic", "phenopackets", "phenopackets_gene"])
    assert t.columns[-2:] == ["phenopackets answerable", "phenopackets_gene answerable"]  # synthetic has no notion
    assert t.rows == [["cut", "test", 3, 4, 1, "1 of 2 (test)", "1 of 3 (test)"]]  # the full graph cut nothing


def test_a_download_shows_its_bytes_as_they_come(tmp_path, capsys):
    """A large source file is not fetched in the dark: the download's bar counts its bytes against the length the
    server gives, and the file is the server's."""
    from ark.fetch import download

    body = bytes(range(256)) * 12_000  # 3 MB: several reads
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "big.bin").write_bytes(body)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(QuietHandler, directory=str(tmp_path / "served")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        download(f"http://127.0.0.1:{server.server_address[1]}/big.bin", tmp_path / "big.bin")
    finally:
        server.shutdown()
        server.server_close()
    assert (tmp_path / "big.bin").read_bytes() == body
    err = capsys.readouterr().err
    assert "downloading http://127.0.0.1" in err and "big.bin" in err and "2.93M/2.93M" in err, err
