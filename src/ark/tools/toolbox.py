"""The agent's tools (DESIGN §4.2): schemas the LLM sees, their execution, and the observation text.

Ablations are tool-set configurations: ``neighbors=False`` removes ``search_in_neighborhood``,
``query_param=False`` removes its ``query`` parameter, ``type_filters=False`` removes
``node_type``/``edge_type``. Every invalid call returns an error observation; nothing raises.
Text from the graph is untrusted: a node's name and snippet appear in observations as JSON strings
(``quoted``), and the system prompt tells the model that they are data, not instructions. Node-type and relation
names (``label``) are shown bare when they are plain words, as in BioKG and STaRK, and otherwise quoted the same
way: a newline or bracket in one cannot start a line that passes for a node.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import json
import logging
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from ark.graph.graph import OUT
from ark.index.topk import top_k

if TYPE_CHECKING:
    from ark.graph.graph import Graph
    from ark.index import Relevance


@dataclass(frozen=True)
class ToolConfig:
    neighbors: bool = True
    query_param: bool = True
    type_filters: bool = True
    global_k: int = 5
    global_k_max: int = 30
    neighbor_k: int = 20
    snippet_chars: int = 160
    # size caps on untrusted text (a model's arguments, node text from the graph): far above anything a real call or
    # BioKG/STaRK node needs, so only runaway input is cut or refused
    argument_chars: int = 4000  # a string argument (longest seen: a 1,199-character phenopacket case as a query)
    name_chars: int = 300  # a node name in an observation (longest in BioKG: 187)
    observation_chars: int = 16000  # one observation (longest seen: 6,183)

    @classmethod
    def from_cfg(cls, ablation, agent=None) -> "ToolConfig":
        """``ablation``: the ablation's switches (``ark.build.AblationSettings``); ``agent``: the agent settings (tool
        sizes)."""
        kw = {k: getattr(ablation, k) for k in ("neighbors", "query_param", "type_filters")}
        if agent is not None:
            kw.update(global_k=agent.global_k, global_k_max=agent.global_k_max, neighbor_k=agent.neighbor_k)
        return cls(**kw)


@dataclass
class Observation:
    text: str
    error: str | None = None  # set when the call was invalid or the tool failed
    tool_failed: bool = False  # the tool itself raised (a bug or a broken index), not a bad call
    nodes: list[int] = field(default_factory=list)  # node ids shown, in order


@dataclass
class AnswerState:
    answer: list[int] = field(default_factory=list)
    finished: bool = False


class ToolError(ValueError):
    pass


class Toolbox:
    toolset = "ark"  # the interface's name (agent.toolset); ark.tools.ark_v1 is the other
    example_call = ("search_in_graph", {"query": "..."})  # shown to a model that replied without a tool call
    # tools whose observation is a function of their arguments alone (not of the answer state): remembered
    pure_tools = ("search_in_graph", "search_in_neighborhood")
    remembered = 20_000  # observations kept (each at most observation_chars)

    def __init__(self, graph: Graph, relevance: Relevance, config: ToolConfig = ToolConfig()):
        self.graph = graph
        self.relevance = relevance
        self.config = config
        # the agents of a run repeat calls (5 sampled agents a query: ~1 call in 5 is new), so each distinct call
        # of a pure tool is computed once per toolbox; the observations are the same either way
        self._memo: OrderedDict[tuple, Observation] = OrderedDict()
        self._memo_lock = threading.Lock()

    # ------------------------------------------------------------------ schemas
    def names(self) -> list[str]:
        return [s["function"]["name"] for s in self.schemas()]

    def schemas(self) -> list[dict]:
        """OpenAI function-calling schemas of the tools in use."""
        c, g = self.config, self.graph
        tools = [
            _function(
                "search_in_graph",
                f"Search all nodes of the knowledge graph by text relevance ({self.relevance.name}) to a query. "
                f"Returns the `size` best nodes (default {c.global_k}, at most {c.global_k_max}).",
                {
                    "query": {"type": "string", "maxLength": c.argument_chars, "description": "Search text."},
                    "size": {"type": "integer", "minimum": 1, "maximum": c.global_k_max,
                             "description": "Number of nodes to return."},
                },
                ["query"],
            )
        ]
        if c.neighbors:
            params: dict = {"node_index": {"type": "integer", "minimum": 0, "maximum": g.num_nodes - 1,
                                           "description": "Index of the node whose neighbors to list."}}
            if c.query_param:
                params["query"] = {"type": "string", "maxLength": c.argument_chars,
                                   "description": "Optional text; neighbors are ranked by relevance to it."}
            if c.type_filters:
                params["node_type"] = _type_filter(g.node_type_names, "Keep only neighbors of these node types.")
                params["edge_type"] = _type_filter(g.relation_names, "Keep only neighbors linked by these relations.")
            ranked = "ranked by relevance to `query`" if c.query_param else "in a fixed order"
            tools.append(_function(
                "search_in_neighborhood",
                f"List the one-hop neighbors of a node (both edge directions), {ranked}; "
                f"shows the top {c.neighbor_k} and how many there are in all.",
                params,
                ["node_index"],
            ))
        tools.append(_function(
            "add_to_answer",
            "Append nodes to the answer list, best first. Nodes already in the list are ignored.",
            {"answer_nodes": {"type": "array", "minItems": 1, "items": {
                "type": "object",
                "properties": {"node_index": {"type": "integer", "minimum": 0, "maximum": g.num_nodes - 1},
                               "reasoning": {"type": "string", "maxLength": c.argument_chars}},
                "required": ["node_index"],
            }}},
            ["answer_nodes"],
        ))
        tools.append(_function("finish", "Stop: the answer list is final.",
                               {"comment": {"type": "string", "maxLength": c.argument_chars,
                                            "description": "Optional remark."}}, []))
        return tools

    # ------------------------------------------------------------------ dispatch
    def call(self, name: str, arguments, state: AnswerState) -> Observation:
        """Execute one tool call; any problem becomes an error observation."""
        try:
            args = _parse_arguments(arguments)
            if name not in self.names():
                raise ToolError(f"unknown tool {name!r}; available tools: {', '.join(self.names())}")
            spec = next(s["function"] for s in self.schemas() if s["function"]["name"] == name)
            allowed, required = spec["parameters"]["properties"], spec["parameters"].get("required", [])
            extra = sorted(set(args) - set(allowed))
            if extra:
                raise ToolError(f"{name} got unexpected parameter(s) {', '.join(extra)}; "
                                f"parameters: {', '.join(allowed) or 'none'}")
            missing = [p for p in required if args.get(p) is None]
            if missing:
                raise ToolError(f"{name} is missing required parameter(s) {', '.join(missing)}")
            longest = max(_string_lengths(args), default=0)
            if longest > self.config.argument_chars:
                raise ToolError(f"a string argument of {name} has {longest:,} characters; at most "
                                f"{self.config.argument_chars:,} are accepted")
            if name not in self.pure_tools:
                return self._capped(getattr(self, name)(state=state, **args))
            return self._remembered((name, repr(sorted(args.items()))),  # repr: 5, "5" and np.int64(5) differ
                                    lambda: self._capped(getattr(self, name)(**args)))
        except ToolError as e:
            return Observation(text=f"Error: {e}", error=str(e))
        except Exception as e:  # a failing tool must not end the run: the agent sees it, the record counts it
            error = f"the tool {name} failed ({type(e).__name__}: {e})"
            logging.getLogger(__name__).warning("%s", error, exc_info=True)
            return Observation(text=f"Error: {error}", error=error, tool_failed=True)

    # ------------------------------------------------------------------ tools
    def search_in_graph(self, query, size=None, state: AnswerState | None = None) -> Observation:
        query = _as_text(query, "query")
        if not query.strip():
            raise ToolError("query is empty")
        size = self.config.global_k if size is None else min(_as_int(size, "size"), self.config.global_k_max)
        if size < 1:
            raise ToolError("size must be at least 1")
        ids, scores = self.relevance.search(query, size)
        if len(ids) == 0:
            return Observation(text=f"No node matches {query!r}.")
        lines = [f"Top {len(ids)} nodes for {query!r}:"]
        lines += [self._line(int(v), float(s)) for v, s in zip(ids, scores)]
        return Observation(text="\n".join(lines), nodes=[int(v) for v in ids])

    def search_in_neighborhood(self, node_index, query=None, node_type=None, edge_type=None,
                               state: AnswerState | None = None) -> Observation:
        g, k = self.graph, self.config.neighbor_k
        center = self._node(node_index)
        query = None if query is None else _as_text(query, "query")
        type_ids = self._filter(node_type, g.type_ids, "node_type")
        rel_ids = self._filter(edge_type, g.relation_ids, "edge_type")
        sl = g.neighbors(center)
        nbr, rel, out = np.asarray(g.nbr[sl]), np.asarray(g.rel[sl]), np.asarray(g.out[sl])
        keep = nbr != center
        if type_ids is not None:
            keep &= _member(type_ids, len(g.node_type_names))[g.node_type[nbr]]
        if rel_ids is not None:
            keep &= _member(rel_ids, len(g.relation_names))[rel]
        if not keep.all():
            kept = np.flatnonzero(keep)  # taking by index beats a boolean mask that keeps a fraction
            nbr, rel, out = nbr[kept], rel[kept], out[kept]
        # rows are sorted by neighbor id: runs of equal ids are one neighbor reached by several relations
        first = np.ones(len(nbr), bool)
        first[1:] = nbr[1:] != nbr[:-1]
        ids = nbr if first.all() else nbr[first]
        total = len(ids)
        header = f"Neighbors of {self._label(center)}"
        filters = [f"{n}={v if all(PLAIN.fullmatch(x) for x in ([v] if isinstance(v, str) else v)) else quoted(str(v))}"
                   for n, v in (("node_type", node_type), ("edge_type", edge_type)) if v]
        if filters:
            header += f" ({', '.join(filters)})"
        if total == 0:
            return Observation(text=f"{header}: none.")
        if query and query.strip():
            scores = self.relevance.score(query, ids)
            order = top_k(scores, k, positive_only=False)[0]
            how = f"ranked by relevance to {query!r}"
        else:
            scores, order = None, np.arange(min(k, total))
            how = "in node-index order"
        lines = [f"{header}: showing {len(order)} of {total}, {how}:"]
        for i in order:
            v = ids[i]  # of nbr's dtype: searchsorted would copy nbr to match another
            lo, hi = np.searchsorted(nbr, v, "left"), np.searchsorted(nbr, v, "right")
            links = ", ".join(
                f"-[{label(g.relation_names[r])}]->" if d == OUT else f"<-[{label(g.relation_names[r])}]-"
                for r, d in zip(rel[lo:hi], out[lo:hi])
            )
            lines.append(self._line(int(v), None if scores is None else float(scores[i]), links))
        return Observation(text="\n".join(lines), nodes=[int(ids[i]) for i in order])

    def add_to_answer(self, answer_nodes, state: AnswerState) -> Observation:
        if not isinstance(answer_nodes, list) or not answer_nodes:
            raise ToolError("answer_nodes must be a non-empty list of {node_index, reasoning} objects")
        nodes = []
        for item in answer_nodes:
            if not isinstance(item, dict) or "node_index" not in item:
                raise ToolError(f"each answer node needs a node_index, got {item!r}")
            nodes.append(self._node(item["node_index"]))
        added = [v for v in dict.fromkeys(nodes) if v not in state.answer]
        state.answer.extend(added)
        skipped = len(set(nodes)) - len(added)
        text = f"Added {len(added)} node(s): " + ("; ".join(self._label(v) for v in added) or "none")
        if skipped:
            text += f" ({skipped} already in the answer)"
        return Observation(text=f"{text}. The answer list has {len(state.answer)} node(s).", nodes=added)

    def finish(self, comment=None, state: AnswerState | None = None) -> Observation:
        if state is not None:
            state.finished = True
        n = len(state.answer) if state is not None else 0
        return Observation(text=f"Finished with {n} node(s) in the answer.")

    # ------------------------------------------------------------------ helpers
    def _remembered(self, key: tuple, compute) -> Observation:
        """A copy of the observation of ``key``, computed once (LRU of ``remembered`` entries)."""
        with self._memo_lock:
            obs = self._memo.get(key)
            if obs is not None:
                self._memo.move_to_end(key)
        if obs is None:
            obs = compute()
            with self._memo_lock:
                self._memo[key] = obs
                if len(self._memo) > self.remembered:
                    self._memo.popitem(last=False)
        return replace(obs, nodes=list(obs.nodes))

    def _capped(self, obs: Observation) -> Observation:
        n = self.config.observation_chars
        if len(obs.text) > n:
            obs.text = obs.text[:n] + f"\n... (observation cut at {n:,} of {len(obs.text):,} characters)"
        return obs

    def _name(self, v: int) -> str:
        """The node's name, cut to ``name_chars`` and quoted (see ``quoted``)."""
        name, n = str(self.graph.name[v]), self.config.name_chars
        return quoted(name if len(name) <= n else name[: n - 3] + "...")

    def _source(self, v: int) -> str:
        """The node's id in its source (``OMIM:100800``): what tells same-named nodes apart, as in answers."""
        return label(self.graph.source_id(v)[:80])

    def _node(self, v) -> int:
        try:
            return self.graph.check_node(_as_int(v, "node_index"))
        except ValueError as e:
            raise ToolError(str(e)) from None

    def _filter(self, value, lookup, name: str):
        if value is None or value == [] or value == "":
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise ToolError(f"{name} must be a string or a list of strings, got {value!r}")
        try:
            return lookup(value)
        except ValueError as e:
            raise ToolError(str(e)) from None

    def _label(self, v: int) -> str:
        return f"[{v}] {label(self.graph.type_name(v))} {self._name(v)} ({self._source(v)})"

    def _line(self, v: int, score: float | None, links: str = "") -> str:
        parts = [f"[{v}] {label(self.graph.type_name(v))} | {self._name(v)} | {self._source(v)}"]
        if score is not None:
            parts.append(f"score {score:.2f}")
        if links:
            parts.append(links)
        parts.append(quoted(self.snippet(v)))
        return " | ".join(parts)

    def snippet(self, v: int) -> str:
        """The start of the node's document without its name/type lines, on one line."""
        n = self.config.snippet_chars
        head = str(self.graph.doc[v])[: 3 * n + 200]  # enough text for the snippet; documents can be long
        lines = [l.strip().removeprefix("- ") for l in head.splitlines()]
        text = " ".join(l for l in lines if not l.startswith(("name:", "type:", "source:", "details:")))
        text = re.sub(r"\s+", " ", text).strip()
        return text if len(text) <= n else text[: n - 3].rstrip() + "..."


def _member(ids: np.ndarray, size: int) -> np.ndarray:
    """A boolean lookup table over 0..size-1, true at ``ids`` (one gather per neighbor, where np.isin sorts)."""
    table = np.zeros(size, dtype=bool)
    table[ids] = True
    return table


PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _/().,:+-]{0,99}")


def label(name: str) -> str:
    """A node-type or relation name in an observation or the prompt: bare when it is plain words (letters, digits,
    spaces, ``_/().,:+-``), else ``quoted`` like a node's name."""
    return name if PLAIN.fullmatch(name) else quoted(name)


def quoted(text: str) -> str:
    """Graph text (a node's name or snippet) as one JSON string: whatever it says, it cannot end its quotes or
    start a line of its own, so it cannot pass for a tool's own output or another node."""
    return json.dumps(text, ensure_ascii=False)


def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


def _type_filter(values: list[str], description: str) -> dict:
    enum = {"type": "string", "enum": list(values)}
    return {"anyOf": [enum, {"type": "array", "items": enum, "minItems": 1}], "description": description}


def _parse_arguments(arguments) -> dict:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise ToolError(f"arguments are not valid JSON ({e.msg} at position {e.pos})") from None
    if not isinstance(arguments, dict):
        raise ToolError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    return arguments


def _string_lengths(value):
    """Lengths of every string in a parsed argument structure (dict keys and values, list items)."""
    if isinstance(value, str):
        yield len(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _string_lengths(k)
            yield from _string_lengths(v)
    elif isinstance(value, list):
        for v in value:
            yield from _string_lengths(v)


def _as_int(value, name: str) -> int:
    if isinstance(value, bool):
        raise ToolError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ToolError(f"{name} must be an integer, got {value!r}")


def _as_text(value, name: str) -> str:
    if not isinstance(value, str):
        raise ToolError(f"{name} must be a string, got {value!r}")
    return value
