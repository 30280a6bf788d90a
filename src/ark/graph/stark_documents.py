"""STaRK node documents, following STaRK's ``get_doc_info`` templates (``add_rel=False``), and the relation text
of ``get_rel_info`` (``add_rel=True``) for the node types STaRK renders it for. Used by ``ark.graph.stark``."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd


if TYPE_CHECKING:
    from ark.graph.graph import Graph

AMAZON_MAX_ENTRIES = 25  # STaRK's max_entries: reviews / Q&A stop after entry max_entries + 2
GENE_KEY_NOTES = {
    "name": "gene name",
    "type_of_gene": "gene types",
    "alias": "other gene names",
    "other_names": "extended other gene names",
    "genomic_pos": "genomic position",
    "generif": "PubMed text",
    "interpro": "protein family and classification information",
    "summary": "protein summary text",
}


def _text(value) -> str:
    return value if isinstance(value, str) else str(value)


def prime_doc(info: dict) -> str:
    """STaRK PrimeSKB.get_doc_info(add_rel=False, compact=False)."""
    doc = f"- name: {info.get('name')}\n- type: {info.get('type')}\n- source: {info.get('source')}\n"
    lines = []
    details = info.get("details")
    for key, value in (details.items() if isinstance(details, dict) else ()):
        if str(value) in ("", "nan") or key.startswith("_") or "_id" in key:
            continue
        if info.get("type") == "gene/protein" and key in GENE_KEY_NOTES:
            if key == "interpro":
                value = [v["desc"] for v in ([value] if isinstance(value, dict) else value)]
            elif key == "generif":
                value = " ".join("; ".join(v["text"] for v in value).split(" ")[:50000])
            elif key == "genomic_pos" and isinstance(value, list):
                value = value[0]
            lines.append(f"  - {key} ({GENE_KEY_NOTES[key]}): {value}\n")
        else:
            lines.append(f"  - {key}: {value}\n")
    if lines:
        doc += "- details:\n" + "".join(lines)
    return doc


def mag_doc(info: dict, node_type: str) -> str:
    """STaRK MagSKB.get_doc_info(add_rel=False, compact=False); missing values are -1."""
    if node_type == "paper":
        doc = f" - paper title: {info.get('title')}\n"
        doc += " - abstract: " + _text(info.get("abstract")).replace("\r", "").rstrip("\n") + "\n"
        if str(info.get("Date", -1)) != "-1":
            doc += f" - publication date: {info['Date']}\n"
        for field, label in (
            ("OriginalVenue", "venue"),
            ("JournalDisplayName", "journal"),
            ("ConferenceSeriesDisplayName", "conference"),
            ("ConferenceInstancesDisplayName", "conference"),
        ):
            if str(info.get(field, -1)) != "-1":
                doc += f" - {label}: {info[field]}\n"
                break
        return doc
    first, label = {
        "author": ("- author name", "author"),
        "field_of_study": (" - field of study", "field"),
        "institution": (" - institution", "institution"),
    }[node_type]
    doc = f"{first}: {info.get('DisplayName')}\n"
    if info.get("PaperCount", -1) != -1:
        doc += f"- {label} paper count: {info['PaperCount']}\n"
    if info.get("CitationCount", -1) != -1:
        doc += f"- {label} citation count: {info['CitationCount']}\n"
    return doc.replace("-1", "Unknown")


def _vote(review: dict) -> int:
    vote = review.get("vote")
    return 0 if pd.isnull(vote) else int(str(vote).replace(",", ""))


def amazon_doc(info: dict, node_type: str, dimensions: bool = True) -> str:
    """STaRK AmazonSKB.get_doc_info(add_rel=False, compact=False).

    ``dimensions=True`` writes the dimensions/weight lines of a ``details`` dict, as stark-qa 1.1.0 does
    (tests/test_stark_parity.py); ``dimensions=False`` leaves them out.
    """
    if node_type in ("brand", "category", "color"):
        return f"{node_type} name: {info.get(node_type + '_name')}"
    doc = f"- product: {info.get('title')}\n"
    if "brand" in info:
        doc += f"- brand: {info['brand']}\n"
    details = info.get("details")
    if dimensions and isinstance(details, dict) and isinstance(details.get("product_dimensions"), str):
        parts = details["product_dimensions"].split(" ; ")
        if len(parts) == 2:
            doc += f"- dimensions: {parts[0]}\n- weight: {parts[1]}\n"
    if info.get("description"):
        description = " ".join(info["description"]).strip(" ")
        if description:
            doc += f"- description: {description}\n"
    if info.get("feature"):
        doc += "- features: \n"
        for i, feature in enumerate(info["feature"]):
            if feature and "asin" not in feature.lower():
                doc += f"#{i + 1}: {feature}\n"
    reviews = info.get("review")
    if reviews:
        doc += "- reviews: \n"
        order = np.argsort(-np.array([_vote(r) for r in reviews]))  # same call as STaRK, same tie order
        for shown, i in enumerate(order):
            doc += f'#{i + 1}:\nsummary: {reviews[i]["summary"]}\ntext: "{reviews[i]["reviewText"]}"\n'
            if shown > AMAZON_MAX_ENTRIES:
                break
    if info.get("qa"):
        doc += "- Q&A: \n"
        for i, qa in enumerate(info["qa"]):
            doc += f'#{i + 1}:\nquestion: "{qa["question"]}"\nanswer: "{qa["answer"]}"\n'
            if i > AMAZON_MAX_ENTRIES:
                break
    return doc


# ---------------------------------------------------------------- relation text (add_rel=True)
def _neighbors_by_relation(graph: Graph, v: int, relation: int) -> np.ndarray:
    """Distinct neighbors of v through one relation, ascending (STaRK's per-type adjacency row)."""
    s = graph.neighbors(v)
    return np.unique(graph.nbr[s][graph.rel[s] == relation])


def prime_relations(graph: Graph, infos: list[dict], v: int) -> str:
    """STaRK PrimeSKB.get_rel_info(idx) (all neighbors, n_rel=-1)."""
    doc = ""
    for relation, relation_name in enumerate(graph.relation_names):
        ids = _neighbors_by_relation(graph, v, relation)
        if len(ids) == 0:
            continue
        doc += f"\n  {relation_name.replace(' ', '_')}: " + "{"
        types = graph.node_type[ids]
        for t in set(types.tolist()):  # STaRK iterates a set built the same way
            names = ", ".join(str(infos[i].get("name")) for i in ids[types == t])
            doc += f"{graph.node_type_names[t]}: ({names}),"
        doc += "}"
    return "- relations:" + doc if doc else ""  # each relation starts on a new line; no newline of its own here


def mag_relations(graph: Graph, infos: list[dict], v: int) -> str:
    """STaRK MagSKB.get_rel_info(idx) (all neighbors)."""
    affiliated = graph.relation_names.index("author___affiliated_with___institution")
    doc = ""
    for relation, relation_name in enumerate(graph.relation_names):
        ids = _neighbors_by_relation(graph, v, relation)
        if len(ids) == 0:
            continue
        doc += f"\n{relation_name.replace('___', ' ')}: "
        names = []
        for i in ids.tolist():
            info, kind = infos[i], graph.type_name(i)
            if kind == "paper":
                names.append(f'"{info.get("title")}"')
            elif str(info.get("DisplayName", -1)) == "-1":
                continue
            elif kind == "author":
                places = [
                    str(infos[j].get("DisplayName"))
                    for j in _neighbors_by_relation(graph, i, affiliated).tolist()
                    if str(infos[j].get("DisplayName", -1)) != "-1"
                ]
                names.append(f"{info['DisplayName']} ({', '.join(places)})" if places else str(info["DisplayName"]))
            else:
                names.append(str(info["DisplayName"]))
        doc += "(" + ", ".join(names) + "),"
    return "- relations:\n" + doc if doc else ""


def amazon_relations(graph: Graph, infos: list[dict], v: int) -> str:
    """STaRK AmazonSKB.get_rel_info(idx): also-bought and also-viewed titles, the brand."""
    doc = ""
    for relation_name, label in (("also_buy", "products also purchased"), ("also_view", "products also viewed")):
        if relation_name in graph.relation_names:
            ids = _neighbors_by_relation(graph, v, graph.relation_names.index(relation_name))
            if len(ids):
                doc += f"  {label}: \n" + "".join(f"#{k + 1}: {infos[i].get('title')}\n" for k, i in enumerate(ids))
    if "has_brand" in graph.relation_names:
        brands = _neighbors_by_relation(graph, v, graph.relation_names.index("has_brand"))
        if len(brands):
            doc += f"  brand: {infos[brands[0]].get('brand_name')}\n"
    return "- relations:\n" + doc if doc else ""
