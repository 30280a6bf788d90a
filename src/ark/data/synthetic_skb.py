"""STaRK-size synthetic knowledge bases, written as STaRK's own files: a MAG-shaped and a PRIME-shaped graph.

``generate_skb(skb, out_dir, nodes, seed, queries)`` writes ::

    out_dir/processed/{node_info.pkl, node_types.pt, node_type_dict.pkl, edge_index.pt, edge_types.pt,
                       edge_type_dict.pkl}
    out_dir/qa/stark_qa/stark_qa.csv, out_dir/qa/split/{train,val,test}.index

the files `ark.graph.stark` and `ark.data.stark` read for the real release, so every stage runs on them unchanged.

Graph. Node types in the real graph's proportions, scaled to ``nodes``; per relation the real graph's edges per node
between its real endpoint types. Each endpoint is drawn with a per-node weight: on a hub side, Zipf over the node's
popularity rank (one shuffled rank order per node type, shared by all its relations, so a hub gene is a hub in every
relation); on the other side, lognormal (no hubs). Repeated pairs and self loops are dropped, so dense relations
lose a few percent of their edges (more at small sizes, where they saturate). MAG is written directed, as STaRK ships
it (the loader's merge makes it undirected); a paper only cites papers with a smaller id (older ones), so "x cites y"
survives the merge as an edge between y < x. PRIME is written with both arcs of every pair, as PRIME ships.

Text. Words are made-up (pronounceable syllables; English function words at the top ranks), drawn Zipf(1) from a
200k-word vocabulary, so posting-list lengths look real. Paper abstracts and PRIME details have lognormal lengths (a
few hundred words for abstracts, heavy-tailed gene summaries); names are short. A node named from the vocabulary gets
a word by its popularity rank, so hubs carry frequent words (as "Computer science" does), and the rest rare ones.

Queries. Two templates per graph, each asking for the nodes of one type linked to two anchors; the gold is the exact
intersection of the two anchors' neighbor sets (1 to ``max_answers`` nodes). Made answer-first: a random answer node,
then one anchor among its neighbors per hop, picked at random (the selective template: rare names) or as its most
popular neighbor (the frequent-terms template: hub names made of frequent words). Anchors have unique names.

Deterministic: the same arguments give byte-identical files. Nothing is held per edge but numpy arrays; node_info is
one dict per node, as STaRK's is (about 1 KB per paper: its abstract).
"""
from __future__ import annotations

import csv
import pickle
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ark.data.queries import SPLITS, split_of
from ark.errors import UserError
from ark.io import atomic_dir
from ark.settings import check_int
from ark.graph.stark import MAG_EDGE_TYPES, MAG_NODE_TYPES, PRIME_EDGE_TYPES, PRIME_NODE_TYPES

QA_DIR = "qa"
SETTINGS = {"nodes": 1000, "seed": 0, "queries": 1, "max_answers": 1}  # generate_skb's settings, their least values


@dataclass(frozen=True)
class Relation:
    name: str  # STaRK's relation name
    src: str  # node type of the stored source
    dst: str
    count: int  # edges (undirected pairs) in the real graph
    src_skew: float | None  # Zipf exponent of the source side's weights over popularity ranks; None: lognormal
    dst_skew: float | None


@dataclass(frozen=True)
class Hop:
    relation: str
    anchor: str  # the anchor's node type
    pick: str  # "random" neighbor of the answer, or its most popular ("hub")


@dataclass(frozen=True)
class Template:
    kind: str  # selective | frequent
    text: str  # with {0}, {1}: the anchors' names
    answer: str  # node type of the answers
    hops: tuple[Hop, Hop]


@dataclass(frozen=True)
class Schema:
    skb: str
    node_types: dict[int, str]
    edge_types: dict[int, str]
    real_nodes: dict[str, int]  # nodes per type in the real graph
    relations: tuple[Relation, ...]
    templates: tuple[Template, ...]
    interleaved: bool  # node ids of all types mixed (PRIME) or in type blocks (MAG)
    symmetric: bool  # write both arcs of every pair
    named_types: tuple[str, ...]  # types whose names are vocabulary words chosen by popularity (`_name_words`)


# STaRK paper's counts (MAG's rounded); PRIME's relation counts are PrimeKG's rows / 2 (they sum to its 8,100,498 arcs)
MAG = Schema(
    skb="mag", node_types=MAG_NODE_TYPES, edge_types=MAG_EDGE_TYPES, interleaved=False, symmetric=False,
    named_types=("field_of_study",),
    real_nodes={"author": 1_104_554, "institution": 8_740, "field_of_study": 59_465, "paper": 700_209},
    relations=(
        Relation("author___affiliated_with___institution", "author", "institution", 2_000_000, None, 0.8),
        # the citing side is drawn uniformly among the papers newer than the cited one (`_edges`)
        Relation("paper___cites___paper", "paper", "paper", 9_700_000, None, 0.7),
        Relation("paper___has_topic___field_of_study", "paper", "field_of_study", 14_500_000, None, 0.9),
        Relation("author___writes___paper", "author", "paper", 13_500_000, 0.5, None),
    ),
    templates=(
        Template("selective", "Which papers did {0} write on {1}?", "paper",
                 (Hop("author___writes___paper", "author", "random"),
                  Hop("paper___has_topic___field_of_study", "field_of_study", "random"))),
        Template("frequent", 'Find papers on {0} that cite the paper "{1}".', "paper",
                 (Hop("paper___has_topic___field_of_study", "field_of_study", "hub"),
                  Hop("paper___cites___paper", "paper", "random"))),
    ),
)
_G, _D, _DR, _PH = "gene/protein", "disease", "drug", "effect/phenotype"
_BP, _MF, _CC, _AN, _PW, _EX = ("biological_process", "molecular_function", "cellular_component", "anatomy",
                                "pathway", "exposure")
PRIME = Schema(
    skb="prime", node_types=PRIME_NODE_TYPES, edge_types=PRIME_EDGE_TYPES, interleaved=True, symmetric=True,
    named_types=(_D, _MF, _PW, _AN, _PH, _BP, _CC, _EX),
    real_nodes={_D: 17_080, _G: 27_671, _MF: 11_169, _DR: 7_957, _PW: 2_516, _AN: 14_035, _PH: 15_311, _BP: 28_642,
                _CC: 4_176, _EX: 818},
    relations=(
        Relation("ppi", _G, _G, 321_075, 0.6, 0.6),
        Relation("carrier", _DR, _G, 864, None, 0.6),
        Relation("enzyme", _DR, _G, 5_317, None, 0.6),
        Relation("target", _DR, _G, 16_380, None, 0.6),
        Relation("transporter", _DR, _G, 3_092, None, 0.6),
        Relation("contraindication", _DR, _D, 30_675, 0.5, 0.5),
        Relation("indication", _DR, _D, 9_388, 0.5, 0.5),
        Relation("off-label use", _DR, _D, 2_568, 0.5, 0.5),
        Relation("synergistic interaction", _DR, _DR, 1_336_314, None, None),
        Relation("associated with", _D, _G, 80_411, 0.5, 0.6),
        Relation("associated with", _PH, _G, 3_330, 0.5, 0.6),
        *(Relation("parent-child", t, t, n, None, 0.6) for t, n in (
            (_D, 32_194), (_BP, 52_886), (_MF, 13_574), (_CC, 4_845), (_PH, 18_736), (_AN, 14_032), (_PW, 2_535),
            (_EX, 2_070))),
        Relation("phenotype absent", _D, _PH, 1_193, None, 0.7),
        Relation("phenotype present", _D, _PH, 150_317, None, 0.7),
        Relation("side effect", _DR, _PH, 64_784, None, 0.7),
        *(Relation("interacts with", t, _G, n, 0.6, 0.6) for t, n in (
            (_BP, 144_805), (_MF, 69_530), (_CC, 83_402), (_PW, 42_646), (_EX, 1_212))),
        *(Relation("interacts with", _EX, t, n, 0.5, 0.5) for t, n in ((_BP, 1_625), (_MF, 45), (_CC, 10))),
        Relation("linked to", _EX, _D, 2_304, 0.5, 0.5),
        Relation("expression present", _AN, _G, 1_518_203, 0.7, 0.3),
        Relation("expression absent", _AN, _G, 19_887, 0.5, 0.5),
    ),
    templates=(
        Template("selective", "Which genes are associated with {0} and interact with {1}?", _G,
                 (Hop("associated with", _D, "random"), Hop("interacts with", _BP, "random"))),
        Template("frequent", "Which genes expressed in {0} interact with {1}?", _G,
                 (Hop("expression present", _AN, "hub"), Hop("interacts with", _PW, "random"))),
    ),
)
SCHEMAS = {"mag": MAG, "prime": PRIME}

# ---------------------------------------------------------------- words
FUNCTION_WORDS = ("the of and in to a is we for that with on this by are as an be which from our these it at or "
                  "not their was can").split()
TEXT_VOCABULARY = 200_000  # words drawn by the Zipf law; names may use rarer words beyond it
# no l, t, v, z: no English suffix (-ate, -ive, -ize, -li) can form, so the stemmer keeps every word distinct
_CONSONANTS, _VOWELS = "bdfgkmnprs", "aeiou"
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]
_NAME_ENDINGS = "bdgkmnp"  # names end in a consonant, so they never equal a vocabulary word


def _syllable_words(count: int, syllables: int, rng: np.random.Generator) -> list[str]:
    """``count`` distinct words of ``syllables`` syllables (all of them if fewer exist), in random order."""
    s, total = len(_SYLLABLES), len(_SYLLABLES) ** syllables
    idx = rng.permutation(total)[:count] if count < total else rng.permutation(total)
    digits = [((idx // s ** k) % s).tolist() for k in range(syllables)]
    return ["".join(_SYLLABLES[d] for d in ds) for ds in zip(*digits)]


class Vocabulary:
    """Function words, then 2-, 3- and 4-syllable pseudo-words; texts draw Zipf(1) from the first
    ``TEXT_VOCABULARY``."""

    def __init__(self, size: int, rng: np.random.Generator):
        words = list(FUNCTION_WORDS)
        for syllables in (2, 3, 4):
            if len(words) < size:
                words += _syllable_words(size - len(words), syllables, rng)
        self.words = np.array(words[:size], dtype=object)
        self.cdf = _zipf_cdf(min(size, TEXT_VOCABULARY), 1.0)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return _draw(self.cdf, rng, n).astype(np.int32)

    def texts(self, rng: np.random.Generator, lengths: np.ndarray, planted=()) -> list[str]:
        """One text per length. ``planted``: (word ids, mask) pairs; word i goes to a random place of text i where
        mask i is true."""
        lengths = np.maximum(np.asarray(lengths, np.int64), 1)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        ids = self.sample(rng, int(ends[-1])) if len(ends) else np.zeros(0, np.int32)
        for word, mask in planted:
            at = starts + (rng.random(len(lengths)) * lengths).astype(np.int64)
            ids[at[mask]] = word[mask]
        words = self.words
        return [" ".join(words[ids[a:b]].tolist()) for a, b in zip(starts.tolist(), ends.tolist())]


def _zipf_cdf(n: int, skew: float) -> np.ndarray:
    cdf = np.cumsum(np.arange(1, n + 1, dtype=np.float64) ** -skew)
    return cdf / cdf[-1]


def _draw(cdf: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` positions drawn with the probabilities whose cumulative sums are ``cdf``."""
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(cdf) - 1)


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def _proper_names(count: int, rng: np.random.Generator, min_syllables: int = 2) -> np.ndarray:
    """``count`` distinct capitalised names: CV syllables and a final consonant (never a vocabulary word)."""
    syllables = min_syllables
    while len(_SYLLABLES) ** syllables * len(_NAME_ENDINGS) < count:
        syllables += 1
    stems = _syllable_words(-(-count // len(_NAME_ENDINGS)), syllables, rng)
    names = [_capitalized(s + e) for s in stems for e in _NAME_ENDINGS][:count]
    return np.array(names, dtype=object)[rng.permutation(count)]


# ---------------------------------------------------------------- graph
def _type_counts(schema: Schema, nodes: int) -> dict[str, int]:
    """Nodes per type in the real proportions, at least 2 each, summing to ``nodes``."""
    real = schema.real_nodes
    total = sum(real.values())
    counts = {t: max(2, round(n * nodes / total)) for t, n in real.items()}
    largest = max(counts, key=counts.get)
    counts[largest] += nodes - sum(counts.values())
    return counts


def _weights(rank: np.ndarray, skew: float | None, rng: np.random.Generator) -> np.ndarray:
    """Sampling weights of a relation side: Zipf over the popularity ranks (hubs), or lognormal (none)."""
    if skew is None:
        return rng.lognormal(0.0, 0.5, len(rank))
    return (rank + 1.0) ** -skew


def _sample_pairs(rng, m: int, w_src, w_dst) -> tuple[np.ndarray, np.ndarray]:
    """``m`` (i, j) draws, i with probability ∝ w_src, j ∝ w_dst (positions within each type)."""
    return _draw(np.cumsum(w_src) / w_src.sum(), rng, m), _draw(np.cumsum(w_dst) / w_dst.sum(), rng, m)


@dataclass
class Layout:
    node_type: np.ndarray  # int64 [N], STaRK type id per node
    members: dict[str, np.ndarray]  # type -> node ids, ascending
    rank: dict[str, np.ndarray]  # type -> popularity rank of each member (0 = most popular)


def _layout(schema: Schema, nodes: int, rng: np.random.Generator) -> Layout:
    counts = _type_counts(schema, nodes)
    type_id = {name: i for i, name in schema.node_types.items()}
    labels = np.concatenate([np.full(n, type_id[t], np.int64) for t, n in counts.items()])
    if schema.interleaved:
        labels = labels[rng.permutation(nodes)]
    else:  # type blocks in type-id order (MAG: author, institution, field_of_study, paper)
        labels = np.sort(labels, kind="stable")
    members = {t: np.flatnonzero(labels == type_id[t]) for t in counts}
    rank = {t: rng.permutation(len(ids)) for t, ids in members.items()}
    if schema.skb == "mag":  # older papers (smaller ids) tend to be the well-cited ones
        age = np.linspace(0, 1, len(members["paper"])) + rng.normal(0, 0.3, len(members["paper"]))
        rank["paper"] = np.argsort(np.argsort(age, kind="stable"), kind="stable")
    return Layout(labels, members, rank)


def _edges(schema: Schema, layout: Layout, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per relation of the schema: (src, dst) node ids, distinct pairs, sorted."""
    scale = len(layout.node_type) / sum(schema.real_nodes.values())
    out = []
    for r in schema.relations:
        src_ids, dst_ids = layout.members[r.src], layout.members[r.dst]
        w_src = _weights(layout.rank[r.src], r.src_skew, rng)
        w_dst = _weights(layout.rank[r.dst], r.dst_skew, rng)
        i, j = _sample_pairs(rng, max(1, round(r.count * scale)), w_src, w_dst)
        src, dst = src_ids[i], dst_ids[j]
        if r.name == "paper___cites___paper":  # the citing paper is a newer one, uniform over those after the cited
            cited = src_ids[j]
            later = len(src_ids) - 1 - j
            keep = later > 0
            citing = src_ids[j[keep] + 1 + (rng.random(int(keep.sum())) * later[keep]).astype(np.int64)]
            src, dst = citing, cited[keep]
        elif r.src == r.dst:  # an undirected pair of same-type nodes, stored (smaller, larger)
            src, dst = np.minimum(src, dst), np.maximum(src, dst)
        keep = src != dst
        pairs = np.unique(src[keep] * len(layout.node_type) + dst[keep])
        out.append((pairs // len(layout.node_type), pairs % len(layout.node_type)))
    return out


# ---------------------------------------------------------------- text
def _name_words(vocab: Vocabulary, rank: np.ndarray, slot: int, slots: int) -> np.ndarray:
    """A word per node by popularity rank: rank r of the slot-th named type gets word F + r * slots + slot (F:
    function words), so the most popular nodes of every type get the most frequent pseudo-words, all distinct."""
    return vocab.words[len(FUNCTION_WORDS) + rank * slots + slot]


def _lognormal_lengths(rng, n: int, median: float, sigma: float, low: int, high: int) -> np.ndarray:
    return np.clip(rng.lognormal(np.log(median), sigma, n), low, high).astype(np.int64)


def _pick(pool: np.ndarray, n: int, skew: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` entries of ``pool`` drawn Zipf(skew) by their position."""
    return pool[_draw(_zipf_cdf(len(pool), skew), rng, n)]


def _mag_info(layout: Layout, edges, vocab: Vocabulary, rng) -> tuple[dict, np.ndarray]:
    """node_info and each node's name (DisplayName, or a paper's title)."""
    n = len(layout.node_type)
    m = layout.members
    (aff_src, aff_dst), (cite_src, cite_dst), (topic_src, topic_dst), (write_src, write_dst) = edges
    cited = np.bincount(cite_dst, minlength=n)
    paper_count = np.bincount(write_src, minlength=n) + np.bincount(topic_dst, minlength=n)
    citation_count = (np.bincount(write_src, weights=cited[write_dst], minlength=n)
                      + np.bincount(topic_dst, weights=cited[topic_src], minlength=n))
    institutions = m["institution"]  # their authors' papers and citations
    paper_count[institutions] = np.bincount(aff_dst, weights=paper_count[aff_src], minlength=n)[institutions]
    citation_count[institutions] = np.bincount(aff_dst, weights=citation_count[aff_src], minlength=n)[institutions]
    paper_count, citation_count = paper_count.astype(np.int64), citation_count.astype(np.int64)

    name = np.empty(n, dtype=object)
    authors = m["author"]
    first, last = _proper_names(2_000, rng), _proper_names(max(50_000, len(authors) // 20), rng, 3)
    name[authors] = [f"{a} {b}" for a, b in zip(_pick(first, len(authors), 1.0, rng).tolist(),
                                                _pick(last, len(authors), 0.8, rng).tolist())]
    forms = np.array(["University of {}", "{} University", "{} Institute of Technology", "{} Medical School"],
                     dtype=object)[rng.integers(0, 4, len(institutions))]
    name[institutions] = [f.format(p) for f, p in zip(forms.tolist(),
                                                      _proper_names(len(institutions), rng, 3).tolist())]
    fields, field_rank = m["field_of_study"], layout.rank["field_of_study"]
    content = len(vocab.words) - len(FUNCTION_WORDS)  # the Zipf draw may reach the last words: wrap them around
    second = vocab.words[len(FUNCTION_WORDS) + vocab.sample(rng, len(fields)) % content]
    name[fields] = [_capitalized(a if r < 20 else f"{a} {b}")  # the top fields are one word, as "Mathematics"
                    for a, b, r in zip(_name_words(vocab, field_rank, 0, 1).tolist(), second.tolist(),
                                       field_rank.tolist())]

    # papers: title and abstract each hold the name word of the paper's most popular field
    papers = m["paper"]
    rank_of = np.zeros(n, np.int64)
    rank_of[fields] = field_rank
    order = np.lexsort((rank_of[topic_dst], topic_src))
    with_field, first_at = np.unique(topic_src[order], return_index=True)
    field_word = np.zeros(n, np.int64)
    field_word[with_field] = len(FUNCTION_WORDS) + rank_of[topic_dst[order][first_at]]  # `_name_words`, 1 slot
    planted = [(field_word[papers], np.isin(papers, with_field))]
    titles = vocab.texts(rng, rng.integers(5, 15, len(papers)), planted)
    name[papers] = [_capitalized(t) for t in titles]
    days = (np.sqrt(np.linspace(0, 1, len(papers))) * (69 * 365)).astype("timedelta64[D]")  # more papers lately
    dates = np.datetime_as_string(np.datetime64("1950-01-01") + days, unit="D").tolist()
    venues = _proper_names(max(100, len(papers) // 200), rng)
    venue = np.where(rng.random(len(papers)) < 0.7, _pick(venues, len(papers), 1.0, rng), -1).tolist()
    abstract_lengths = _lognormal_lengths(rng, len(papers), 160, 0.5, 20, 1000)

    info = {}  # in node-id order: the type blocks come in this order
    for t in ("author", "institution", "field_of_study"):
        for v, papers_, citations in zip(m[t].tolist(), paper_count[m[t]].tolist(), citation_count[m[t]].tolist()):
            info[v] = {"DisplayName": name[v], "PaperCount": papers_, "CitationCount": citations, "type": t}
    chunk = 50_000  # abstracts are made a chunk at a time: the drawn word ids are not all held at once
    for lo in range(0, len(papers), chunk):
        hi = min(lo + chunk, len(papers))
        abstracts = vocab.texts(rng, abstract_lengths[lo:hi], [(w[lo:hi], k[lo:hi]) for w, k in planted])
        for k, v in enumerate(papers[lo:hi].tolist()):
            info[v] = {"title": name[v], "abstract": abstracts[k], "Date": dates[lo + k],
                       "OriginalVenue": venue[lo + k], "JournalDisplayName": -1, "ConferenceSeriesDisplayName": -1,
                       "ConferenceInstancesDisplayName": -1, "type": "paper"}
    return info, name


# PRIME: (source, name forms, details: (key, median words, sigma, most words)) per node type
_PRIME_TEXT = {
    _D: ("MONDO", ("{} syndrome", "{} disease", "{} disorder", "{} deficiency"),
         (("mondo_definition", 40, 0.6, 400), ("umls_description", 60, 0.8, 800))),
    _G: ("NCBI", None, (("name", 4, 0.3, 10), ("summary", 80, 1.0, 3000))),
    _MF: ("GO", ("{} binding", "{} activity"), (("definition", 20, 0.5, 120),)),
    _DR: ("DrugBank", None, (("description", 70, 0.6, 600), ("indication", 25, 0.5, 200),
                             ("mechanism_of_action", 40, 0.7, 400))),
    _PW: ("REACTOME", ("{} signaling", "{} pathway", "regulation of {}"), (("summation", 60, 0.7, 500),)),
    _AN: ("UBERON", ("{} tissue", "{} gland", "{}"), (("definition", 15, 0.5, 100),)),
    _PH: ("HPO", ("Abnormal {}", "{} anomaly"), (("definition", 20, 0.6, 200),)),
    _BP: ("GO", ("{} process", "regulation of {}", "{} metabolism"), (("definition", 20, 0.5, 120),)),
    _CC: ("GO", ("{} complex", "{} membrane"), (("definition", 15, 0.5, 100),)),
    _EX: ("CTD", ("{} exposure",), ()),
}


def _prime_info(layout: Layout, vocab: Vocabulary, rng) -> tuple[dict, np.ndarray]:
    n = len(layout.node_type)
    name = np.empty(n, dtype=object)
    details: dict[int, dict] = {}
    named = PRIME.named_types
    for t, (source, forms, fields) in _PRIME_TEXT.items():
        ids = layout.members[t]
        if forms:
            word = _name_words(vocab, layout.rank[t], named.index(t), len(named))
            form = np.array(forms, dtype=object)[rng.integers(0, len(forms), len(ids))]
            name[ids] = [f.format(w) for f, w in zip(form.tolist(), word.tolist())]
        else:  # genes and drugs: symbols such as "KABO12", "Dafumab"
            stems = _proper_names(len(ids), rng)
            name[ids] = ([f"{s.upper()}{i % 97 + 1}" for i, s in enumerate(stems.tolist())] if t == _G
                         else [f"{s}{['mab', 'nib', 'ol', 'ine'][i % 4]}" for i, s in enumerate(stems.tolist())])
        texts = [vocab.texts(rng, _lognormal_lengths(rng, len(ids), med, sigma, 1, most))
                 for _, med, sigma, most in fields]
        for k, v in enumerate(ids.tolist()):
            details[v] = {"source": source, "details": {key: text[k] for (key, *_), text in zip(fields, texts)}}
    info = {}
    for v in range(n):
        t = PRIME_NODE_TYPES[int(layout.node_type[v])]
        extra = details[v]
        info[v] = {"id": str(v), "type": t, "name": name[v], "source": extra["source"]}
        if extra["details"]:
            info[v]["details"] = extra["details"]
    return info, name


# ---------------------------------------------------------------- queries
class _Neighbors:
    """Neighbors through one relation between two types, from its (src, dst) arrays, both directions."""

    def __init__(self, src: np.ndarray, dst: np.ndarray):
        src, dst = src.astype(np.int32), dst.astype(np.int32)  # half the memory of int64 at MAG size
        by_src, by_dst = np.lexsort((dst, src)), np.lexsort((src, dst))
        self.by_src = (src[by_src], dst[by_src])
        self.by_dst = (dst[by_dst], src[by_dst])

    @staticmethod
    def _of(table, v: int) -> np.ndarray:
        keys, values = table
        v = keys.dtype.type(v)  # of the keys' dtype: searchsorted would copy them to match another
        return values[np.searchsorted(keys, v, "left"):np.searchsorted(keys, v, "right")]

    def of(self, v: int, v_is_src: bool) -> np.ndarray:
        """Sorted distinct neighbors of v (v the stored source of the edges, or their target)."""
        return self._of(self.by_src if v_is_src else self.by_dst, v)


def _queries(schema: Schema, layout: Layout, edges, names: np.ndarray, count: int, max_answers: int,
             rng: np.random.Generator) -> list[dict]:
    """``count`` queries, the templates in turn, each with its gold and anchors."""
    hops, tables = {}, {}  # (hop, answer type) -> (_Neighbors, answer is the stored source); relation -> _Neighbors
    for template in schema.templates:
        for hop in template.hops:
            for i, r in enumerate(schema.relations):
                if r.name == hop.relation and {r.src, r.dst} == {hop.anchor, template.answer}:
                    if i not in tables:
                        tables[i] = _Neighbors(*edges[i])
                    # cites: the answer is the citing (newer) paper, the stored source
                    hops[hop, template.answer] = (tables[i], r.src == template.answer)
    unique_name = {}
    for t in {hop.anchor for template in schema.templates for hop in template.hops}:
        counts = Counter(names[layout.members[t]].tolist())
        unique_name[t] = lambda v, c=counts: c[names[v]] == 1
    queries, seen = [], set()
    for k in range(count):
        template = schema.templates[k % len(schema.templates)]
        answers = layout.members[template.answer]
        for _ in range(200):
            seed = int(answers[rng.integers(len(answers))])
            anchors, gold = [], None
            for hop in template.hops:
                table, answer_is_src = hops[hop, template.answer]
                options = table.of(seed, answer_is_src)
                if len(options) == 0:
                    break
                if hop.pick == "hub":
                    anchor = int(options[np.argmin(layout.rank[hop.anchor][np.searchsorted(
                        layout.members[hop.anchor], options)])])
                else:
                    anchor = int(options[rng.integers(len(options))])
                linked = table.of(anchor, not answer_is_src)
                gold = linked if gold is None else np.intersect1d(gold, linked, assume_unique=True)
                anchors.append(anchor)
            else:
                text = template.text.format(*(names[a] for a in anchors))
                if (len(gold) <= max_answers and text not in seen
                        and all(unique_name[h.anchor](a) for h, a in zip(template.hops, anchors))):
                    seen.add(text)
                    queries.append({"id": len(queries), "query": text, "answer_ids": gold.tolist(),
                                    "template": template.kind, "anchors": anchors})
                    break
    return queries


# ---------------------------------------------------------------- files
def _save_tensor(array: np.ndarray, path: Path) -> None:
    import torch

    torch.save(torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64)), path)


def _write_pickle(obj, path: Path) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=4)


def _write_qa(queries: list[dict], qa_dir: Path, seed: int) -> dict[str, int]:
    (qa_dir / "stark_qa").mkdir(parents=True, exist_ok=True)
    (qa_dir / "split").mkdir(parents=True, exist_ok=True)
    with open(qa_dir / "stark_qa" / "stark_qa.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "query", "answer_ids"])
        for q in queries:
            writer.writerow([q["id"], q["query"], str(q["answer_ids"])])
    splits = {s: [] for s in SPLITS}
    for q in queries:
        splits[split_of(f"{seed}:{q['id']}")].append(str(q["id"]))
    for split, ids in splits.items():
        (qa_dir / "split" / f"{split}.index").write_text("\n".join(ids))
    return {s: len(ids) for s, ids in splits.items()}


def generate_skb(skb: str, out_dir: str | Path, nodes: int, seed: int = 0, queries: int = 1000,
                 max_answers: int = 20) -> dict:
    """Write a synthetic ``skb`` ("mag" or "prime") of ``nodes`` nodes and ``queries`` queries under ``out_dir``;
    returns the counts and the queries (with their template kind and anchor node ids)."""
    if skb not in SCHEMAS:
        raise UserError(f"no synthetic generator for STaRK {skb!r}; valid: {', '.join(SCHEMAS)}")
    for key, value in (("nodes", nodes), ("seed", seed), ("queries", queries), ("max_answers", max_answers)):
        check_int(f"dataset.generate.{key}", value, SETTINGS[key])
    schema = SCHEMAS[skb]
    layout_rng, edge_rng, text_rng, query_rng = (np.random.default_rng(s)
                                                 for s in np.random.SeedSequence(seed).spawn(4))
    layout = _layout(schema, nodes, layout_rng)
    edges = _edges(schema, layout, edge_rng)
    name_words = max(len(layout.members[t]) for t in schema.named_types) * len(schema.named_types)
    vocab = Vocabulary(max(TEXT_VOCABULARY, len(FUNCTION_WORDS) + name_words), text_rng)
    info, names = (_mag_info(layout, edges, vocab, text_rng) if skb == "mag"
                   else _prime_info(layout, vocab, text_rng))
    qa = _queries(schema, layout, edges, names, queries, max_answers, query_rng)

    relation_id = {name: i for i, name in schema.edge_types.items()}
    src = np.concatenate([s for s, _ in edges])
    dst = np.concatenate([d for _, d in edges])
    rel = np.concatenate([np.full(len(s), relation_id[r.name], np.int64) for r, (s, _) in zip(schema.relations, edges)])
    del edges
    if schema.symmetric:
        src, dst, rel = np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([rel, rel])
    with atomic_dir(out_dir) as tmp:
        processed = tmp / "processed"
        processed.mkdir()
        _write_pickle(info, processed / "node_info.pkl")
        _save_tensor(np.stack([src, dst]), processed / "edge_index.pt")
        _save_tensor(rel, processed / "edge_types.pt")
        _save_tensor(layout.node_type, processed / "node_types.pt")
        _write_pickle(dict(schema.node_types), processed / "node_type_dict.pkl")
        _write_pickle(dict(schema.edge_types), processed / "edge_type_dict.pkl")
        splits = _write_qa(qa, tmp / QA_DIR, seed)
    return {"nodes": nodes, "arcs": int(len(src)), "nodes_by_type": {t: len(ids) for t, ids in layout.members.items()},
            "queries": splits, "query_list": qa}
