"""The ARK-V1 interface (arXiv 2509.18063) as an alternative tool set (``agent=ark_v1``).

ARK-V1 explores a graph in three decisions: name an anchor entity, choose one of its relations, read that
relation's triples. Here those are ``find_entity`` (a node whose name is exactly the given text, case and spacing
aside), ``get_relations`` (the node's relations, with direction, neighbor type and count) and ``get_triples`` (the
node's neighbors by one relation as (index, type, name), in a fixed order, a page of ``agent.neighbor_k`` at a
time). It has no text search and no ranking by a
query: a node is reached only from an anchor whose exact name the agent knows, through relations. The answer
protocol (``add_to_answer``, ``finish``) is ARK's, so both interfaces are scored the same way.
"""
from __future__ import annotations

from collections import Counter
from functools import cached_property

import numpy as np

from ark.graph.graph import OUT
from ark.tools.toolbox import Observation, ToolError, Toolbox, _as_int, _as_text, _function, label, quoted


def name_key(text: str) -> str:
    """How ``find_entity`` compares names: lower case, runs of whitespace as one space."""
    return " ".join(text.lower().split())


class ArkV1Toolbox(Toolbox):
    toolset = "ark_v1"
    example_call = ("find_entity", {"name": "..."})
    pure_tools = ("find_entity", "get_relations", "get_triples")

    @cached_property
    def names_index(self) -> dict[str, list[int]]:
        """Node ids by ``name_key`` of their name, in id order."""
        index: dict[str, list[int]] = {}
        for v, name in enumerate(self.graph.name):
            index.setdefault(name_key(str(name)), []).append(v)
        return index

    def schemas(self) -> list[dict]:
        c, g = self.config, self.graph
        node = {"type": "integer", "minimum": 0, "maximum": g.num_nodes - 1}
        tools = [
            _function("find_entity",
                      "Find the node(s) whose name is exactly `name` (case and spacing aside): the anchor entity "
                      "to explore from. There is no partial or fuzzy match.",
                      {"name": {"type": "string", "maxLength": c.argument_chars, "description": "The entity's name."}},
                      ["name"]),
            _function("get_relations",
                      "List the relations of a node: each with its direction, the type of node at its other end, and "
                      "how many such neighbors there are.",
                      {"node_index": {**node, "description": "Index of the anchor node."}}, ["node_index"]),
            _function("get_triples",
                      f"List the triples (node, relation, neighbor) of one relation of a node, {c.neighbor_k} at a "
                      "time in a fixed order; `offset` skips that many.",
                      {"node_index": {**node, "description": "Index of the anchor node."},
                       "relation": {"type": "string", "enum": list(g.relation_names)},
                       "offset": {"type": "integer", "minimum": 0, "description": "Triples to skip (paging)."}},
                      ["node_index", "relation"]),
        ]
        return tools + [s for s in super().schemas() if s["function"]["name"] in ("add_to_answer", "finish")]

    # ------------------------------------------------------------------ tools
    def find_entity(self, name, state=None) -> Observation:
        name = _as_text(name, "name")
        if not name.strip():
            raise ToolError("name is empty")
        ids = self.names_index.get(name_key(name), [])
        if not ids:
            return Observation(text=f"No node is named {quoted(name)}; give an entity's exact name.")
        shown = ids[: self.config.global_k_max]
        lines = [f"{len(ids)} node(s) named {quoted(name)}" + (f", the first {len(shown)}:" if len(shown) < len(ids)
                                                                else ":")]
        lines += [self._line(v, None) for v in shown]
        return Observation(text="\n".join(lines), nodes=shown)

    def get_relations(self, node_index, state=None) -> Observation:
        g = self.graph
        v = self._node(node_index)
        sl = g.neighbors(v)
        nbr, rel, out = np.asarray(g.nbr[sl]), np.asarray(g.rel[sl]), np.asarray(g.out[sl])
        keep = nbr != v
        counts = Counter(zip(rel[keep].tolist(), out[keep].tolist(), g.node_type[nbr[keep]].tolist()))
        if not counts:
            return Observation(text=f"{self._label(v)} has no relations.")
        lines = [f"Relations of {self._label(v)}:"]
        for (r, d, t), n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            arrow = f"-[{label(g.relation_names[r])}]->" if d == OUT else f"<-[{label(g.relation_names[r])}]-"
            lines.append(f"{arrow} {label(g.node_type_names[t])}: {n}")
        return Observation(text="\n".join(lines))

    def get_triples(self, node_index, relation, offset=None, state=None) -> Observation:
        g, k = self.graph, self.config.neighbor_k
        v = self._node(node_index)
        r = self._filter(_as_text(relation, "relation"), g.relation_ids, "relation")[0]
        offset = 0 if offset is None else _as_int(offset, "offset")
        if offset < 0:
            raise ToolError("offset must be at least 0")
        sl = g.neighbors(v)
        nbr, rel, out = np.asarray(g.nbr[sl]), np.asarray(g.rel[sl]), np.asarray(g.out[sl])
        rows = np.flatnonzero((rel == r) & (nbr != v))
        name = label(g.relation_names[r])
        if len(rows) == 0:
            return Observation(text=f"{self._label(v)} has no {name} relation.")
        page = rows[offset: offset + k]
        lines = [f"Triples of {self._label(v)} by {name}: {offset + 1}-{offset + len(page)} of {len(rows)}"
                 if len(page) else f"{self._label(v)} has {len(rows)} {name} triples; offset {offset} is past them."]
        for i in page:
            arrow = f"-[{name}]->" if out[i] == OUT else f"<-[{name}]-"
            u = int(nbr[i])
            lines.append(f"{arrow} [{u}] {label(g.type_name(u))} | {self._name(u)}")
        return Observation(text="\n".join(lines), nodes=[int(nbr[i]) for i in page])

