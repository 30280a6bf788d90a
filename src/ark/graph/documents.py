"""Node documents d_V(v): a node's own text plus, for thin nodes, its rendered relations.

The layout follows STaRK's PRIME template (``- name:``, ``- type:``, ``- details:``, ``- relations:``)
so that prompts and tools transfer between BioKG and STaRK.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from collections import defaultdict

import numpy as np

from ark.graph.graph import OUT

if TYPE_CHECKING:
    from ark.graph.graph import Graph


def render_own_text(name: str, type_name: str, source: str, fields: dict) -> str:
    lines = [f"- name: {name}", f"- type: {type_name}"]
    if source:
        lines.append(f"- source: {source}")
    details = [(k, v) for k, v in fields.items() if k != "source" and v not in ("", None, [])]
    if details:
        lines.append("- details:")
        for k, v in details:
            text = "; ".join(map(str, v)) if isinstance(v, list) else str(v)
            lines.append(f"  - {k}: {text}")
    return "\n".join(lines)


def render_relations(graph: Graph, v: int, max_per_relation: int, attr_labels: dict[str, str] | None = None) -> str:
    """``- relations:`` block: one line per (relation, direction, neighbor type), names in neighbor-id order."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    sl = graph.neighbors(v)
    for u, r, d, e in zip(graph.nbr[sl], graph.rel[sl], graph.out[sl], graph.eid[sl]):
        label = graph.relation_names[r] if d == OUT else f"{graph.relation_names[r]} (inverse)"
        names = groups[(label, graph.type_name(u))]
        if len(names) < max_per_relation:
            # Only attributes with a readable label (e.g. HPO frequency terms) go into the text.
            attr = attr_labels.get(graph.edge_attr[e]) if attr_labels else None
            names.append(f"{graph.name[u]} [{attr}]" if attr else str(graph.name[u]))
    if not groups:
        return ""
    lines = ["- relations:"]
    for (label, type_name), names in groups.items():
        lines.append(f"  {label}: {{{type_name}: ({', '.join(names)})}}")
    return "\n".join(lines)


def build_documents(
    graph: Graph, relation_types: list[str], max_per_relation: int, attr_labels: dict[str, str] | None = None
) -> np.ndarray:
    """Documents for every node; nodes whose type is in ``relation_types`` also get their relations."""
    with_relations = set(graph.type_ids(relation_types).tolist()) if relation_types else set()
    docs = np.empty(graph.num_nodes, dtype=object)
    for v in range(graph.num_nodes):
        fields = graph.node_fields(v)
        text = render_own_text(str(graph.name[v]), graph.type_name(v), fields.get("source", ""), fields)
        if int(graph.node_type[v]) in with_relations:
            rel = render_relations(graph, v, max_per_relation, attr_labels)
            if rel:
                text = f"{text}\n{rel}"
        docs[v] = text
    return docs
