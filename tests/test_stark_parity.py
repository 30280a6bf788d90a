"""Parity with STaRK's own code (the PyPI package stark-qa 1.1.0, installed without its dependencies from
requirements/no-deps.txt): small knowledge bases built and saved by STaRK's code in its own format, read by STaRK's
classes and by ``ark.graph.stark.load_stark_skb``. Nodes, types, edges (after STaRK's undirected merge), candidate
ids and documents (with and without relations) must be what STaRK's classes report."""
import importlib
import importlib.util
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ark.graph.stark import load_stark_skb
from tests.test_stark import PRIME_NODES

# STaRK's code uses torch's legacy sparse constructor and torch_geometric's torch.jit.script: their deprecation notes
pytestmark = pytest.mark.filterwarnings("ignore:torch.sparse.SparseTensor:UserWarning",
                                        "ignore:`torch.jit.script` is deprecated:DeprecationWarning")

def _never_called(*args, **kwargs):
    raise AssertionError("the parity test called a stub of a dependency it should never use")


# Stubs, present only while STaRK's modules are imported: modules they import at module level for what this test never
# runs (raw-data builds, Google Drive downloads, synonyms, text chunking), none of which is installed here.
STUBS = {
    "gdown": [],                                     # prime.py: embedding downloads
    "tdc": [], "tdc.resource": ["PrimeKG"],          # prime.py: building PRIME from PrimeKG's raw files
    "nltk": [], "nltk.corpus": ["wordnet"],          # tools/process_text.py: synonyms
    "langchain_text_splitters": ["RecursiveCharacterTextSplitter"],  # tools/process_text.py: chunking
    "langdetect": ["detect"],                        # mag.py: building MAG from raw files
    "ogb": [], "ogb.utils": [], "ogb.utils.url": ["download_url", "extract_zip"],  # mag.py, amazon.py: raw downloads
    "ogb.nodeproppred": ["NodePropPredDataset"],     # mag.py: building MAG from ogbn-mag
}


@pytest.fixture(scope="module")
def stark():
    """STaRK's modules: the knowledge-base classes and its file writer."""
    spec = importlib.util.find_spec("stark_qa")
    if spec is None:
        pytest.skip("stark-qa is not installed (requirements/no-deps.txt, make install)")
    root = Path(spec.submodule_search_locations[0])
    with pytest.MonkeyPatch.context() as mp:
        # stark_qa/__init__.py and stark_qa/skb/__init__.py import every model (colbert, gritlm, ...): stand-in
        # packages let the modules below them be imported alone
        for name, folder in (("stark_qa", root), ("stark_qa.skb", root / "skb")):
            package = types.ModuleType(name)
            package.__path__ = [str(folder)]
            mp.setitem(sys.modules, name, package)
        for name, attributes in STUBS.items():
            stub = types.ModuleType(name)
            for attribute in attributes:
                setattr(stub, attribute, _never_called)
            mp.setitem(sys.modules, name, stub)
        yield SimpleNamespace(**{name: importlib.import_module(f"stark_qa.{module}") for name, module in
                                 (("io", "tools.io"), ("prime", "skb.prime"), ("mag", "skb.mag"),
                                  ("amazon", "skb.amazon"))})
    for name in [n for n in sys.modules if n == "stark_qa" or n.startswith("stark_qa.")]:
        del sys.modules[name]


def stark_arcs(skb) -> list[tuple[int, int, str]]:
    return sorted((int(u), int(v), skb.edge_type_dict[int(t)])
                  for (u, v), t in zip(skb.edge_index.t().tolist(), skb.edge_types.tolist()))


def our_arcs(graph) -> list[tuple[int, int, str]]:
    """Our edges (each undirected pair once) as STaRK's arcs: both directions, a self loop once."""
    arcs = []
    for u, v, r in zip(graph.src.tolist(), graph.dst.tolist(), graph.edge_rel.tolist()):
        arcs += [(u, v, graph.relation_names[r])] + ([(v, u, graph.relation_names[r])] if u != v else [])
    return sorted(arcs)


def assert_same(skb, name: str, root: Path, relation_docs: list[int]):
    """``load_stark_skb(name, root)`` against STaRK's ``skb``; documents with relations for ``relation_docs``."""
    graph = load_stark_skb(name, root)
    n = len(skb)
    assert graph.num_nodes == n == skb.num_nodes()
    assert [graph.type_name(v) for v in range(n)] == [skb.get_node_type_by_id(v) for v in range(n)]
    assert our_arcs(graph) == stark_arcs(skb)
    assert graph.candidate_ids().tolist() == skb.candidate_ids
    assert [graph.doc[v] for v in range(n)] == [skb.get_doc_info(v, add_rel=False, compact=False) for v in range(n)]
    with_relations = load_stark_skb(name, root, relations=True)
    assert [with_relations.doc[v] for v in relation_docs] == [skb.get_doc_info(v, add_rel=True) for v in relation_docs]


def test_prime(stark, tmp_path):
    node_info = {
        **PRIME_NODES,
        3: {"id": "DB00002", "type": "drug", "name": "cetuximab", "source": "DrugBank",
            "details": {"description": "an antibody", "half_life": "nan", "state": "liquid"}},
        4: {"id": "R-1", "type": "pathway", "name": "drug transport", "source": "REACTOME"},
    }
    t = {name: i for i, name in enumerate(stark.prime.PrimeSKB.NODE_TYPES)}
    r = {name: i for i, name in enumerate(stark.prime.PrimeSKB.RELATION_TYPES)}
    # directed, so that STaRK merges: the pair {1, 2} carries transporter (4) one way and target (3) the other,
    # whose mean 3.5 truncates to target; {3, 2} both ways with the same type; {1, 4} one arc
    arcs = [(0, 1, r["associated with"]), (1, 2, r["transporter"]), (2, 1, r["target"]),
            (2, 3, r["synergistic interaction"]), (3, 2, r["synergistic interaction"]), (1, 4, r["interacts with"])]
    stark.io.save_files(str(tmp_path / "prime" / "processed"), node_info=node_info,
                        node_types=torch.LongTensor([t["disease"], t["gene/protein"], t["drug"], t["drug"],
                                                     t["pathway"]]),
                        edge_index=torch.LongTensor([[a[0] for a in arcs], [a[1] for a in arcs]]),
                        edge_types=torch.LongTensor([a[2] for a in arcs]),
                        node_type_dict=dict(enumerate(stark.prime.PrimeSKB.NODE_TYPES)),
                        edge_type_dict=dict(enumerate(stark.prime.PrimeSKB.RELATION_TYPES)))
    skb = stark.prime.PrimeSKB(root=str(tmp_path / "prime"), download_processed=False)
    assert (1, 2, "target") in stark_arcs(skb)  # the merge happened on STaRK's side
    assert_same(skb, "prime", tmp_path, relation_docs=list(range(5)))


def test_mag(stark, tmp_path):
    def paper(title, **extra):
        return {"title": title, "abstract": "We study graphs.\r\n", "Date": -1, "OriginalVenue": -1,
                "JournalDisplayName": -1, "ConferenceSeriesDisplayName": -1, "ConferenceInstancesDisplayName": -1,
                "mag_id": 7, "type": "paper", **extra}

    node_info = {
        0: {"DisplayName": "Ada Lovelace", "PaperCount": 12, "CitationCount": -1, "mag_id": 1, "type": "author"},
        1: {"DisplayName": "Stanford University", "PaperCount": -1, "CitationCount": 90, "type": "institution"},
        2: {"DisplayName": "graph theory", "PaperCount": 5, "CitationCount": 8, "type": "field_of_study"},
        3: paper("Graphs I", Date="2019-03-22", JournalDisplayName="J. Graphs"),
        4: paper("Graphs II", OriginalVenue="KDD", ConferenceSeriesDisplayName="KDD"),
        5: {"DisplayName": "Alan Turing", "PaperCount": 3, "CitationCount": 40, "mag_id": 2, "type": "author"},
    }
    # directed, as STaRK stores MAG; MagSKB brings its own type dicts, so none is saved
    arcs = [(0, 1, 0), (5, 1, 0), (0, 3, 3), (5, 3, 3), (0, 4, 3), (3, 2, 2), (4, 2, 2), (4, 3, 1)]
    stark.io.save_files(str(tmp_path / "mag" / "processed"), node_info=node_info,
                        node_types=torch.LongTensor([0, 1, 2, 3, 3, 0]),
                        edge_index=torch.LongTensor([[a[0] for a in arcs], [a[1] for a in arcs]]),
                        edge_types=torch.LongTensor([a[2] for a in arcs]))
    (tmp_path / "mag" / "schema").mkdir()  # MagSKB downloads the schema when its folder is absent
    skb = stark.mag.MagSKB(root=str(tmp_path / "mag"), download_processed=False)
    assert_same(skb, "mag", tmp_path, relation_docs=[3, 4])  # STaRK adds relations to papers only


def test_amazon(stark, tmp_path):
    products = {
        0: {"title": "Trail Tent", "brand": "Acme", "asin": "B01", "global_category": "Sports and Outdoors",
            "category": ["Camping", "Tents"], "color": ["green"], "price": "$99", "rank": "1",
            "feature": ["Waterproof", "", "ASIN: B01", "Two doors"], "description": ["A light tent.", "Sets up fast. "],
            "details": {"product_dimensions": "80 x 60 x 40 inches ; 4 pounds"},
            "review": [{"summary": "ok", "reviewText": "fine", "vote": "3"},
                       {"summary": "meh", "reviewText": "so so", "vote": None},
                       {"summary": "great", "reviewText": "love it", "vote": "1,200"}],
            "qa": [{"question": "Rain?", "answer": "Yes"}]},
        1: {"title": "Camp Stove", "brand": "Acme", "category": ["Camping"], "color": ["red", "green"],
            "feature": [], "description": [], "review": [], "qa": []},
        2: {"title": "Head Lamp", "brand": "Lumo", "category": ["Hiking"], "feature": ["bright"],
            "description": ["Light."], "review": [], "qa": []},
    }
    # the product graph STaRK's _process_raw makes (also_buy, also_view arcs; the pair {0, 1} carries both), and
    # STaRK's post_process adds the brand, category and color nodes and edges, saving the graph in its cache folder
    arcs = [(0, 1, 0), (1, 0, 1), (2, 0, 1)]
    product_graph = {"node_info": products, "node_types": torch.LongTensor([0, 0, 0]),
                     "edge_index": torch.LongTensor([[a[0] for a in arcs], [a[1] for a in arcs]]),
                     "edge_types": torch.LongTensor([a[2] for a in arcs]),
                     "node_type_dict": {0: "product"}, "edge_type_dict": {0: "also_buy", 1: "also_view"}}
    cache = tmp_path / "amazon" / "processed" / "cache" / "brand-category-color"
    AmazonSKB = stark.amazon.AmazonSKB
    AmazonSKB.post_process(AmazonSKB.__new__(AmazonSKB), product_graph, meta_link_types=["brand", "category", "color"],
                           cache_path=str(cache))
    skb = AmazonSKB(root=str(tmp_path / "amazon"), download_processed=False)
    assert len(skb) == 10  # 3 products, 2 brands, 3 categories, 2 colors: built by STaRK
    assert_same(skb, "amazon", tmp_path, relation_docs=[0, 1, 2])
