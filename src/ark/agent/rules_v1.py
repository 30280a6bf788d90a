"""The scripted, label-free policy over the ARK-V1 interface (``ark.tools.ark_v1``): the offline analogue of an
ARK-V1 agent, as ``RulesPolicy`` is of an ARK agent. It uses the same type words, seed and answer cap.

It reads the question as a person would pick anchors: the longest runs of words that are some node's exact name
(left to right, not overlapping), leaving out sentences that begin with a negation ("Not observed: ...") and names of
the answer's own type. Then, one step each: ``find_entity`` for each anchor (at most ``search_size``);
``get_relations`` of each anchor found; ``get_triples`` of each relation that reaches the answer type. When no anchor
has such a relation, it goes one hop further: through the relations to the other node type most anchors reach, to the
``expand`` neighbors most anchors reach, and from them to the answer type. The answer is the answer-type nodes
found, ranked by how many anchors (or intermediate nodes) reach them, first seen first among equals. It answers at
its last step with what it has. Deterministic.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import re
from collections import Counter

import numpy as np

from ark.agent.policies import answer_type, graph_type_words, scripted_reply
from ark.tools.ark_v1 import name_key

if TYPE_CHECKING:
    from ark.llm.result import LLMResult
    from ark.tools.ark_v1 import ArkV1Toolbox

NEGATED = re.compile(r"(not|no|without|absent|excluded)\b", re.IGNORECASE)
SENTENCE_END = re.compile(r"(?<=[.?!])\s+")


def entity_spans(text: str, names: dict, max_words: int = 8) -> list[str]:
    """The longest runs of words in ``text`` that are keys of ``names`` (by ``name_key``), left to right, not
    overlapping."""
    words = [w.strip(".,;:?!()\"'") for w in text.split()]
    spans, i = [], 0
    while i < len(words):
        for n in range(min(max_words, len(words) - i), 0, -1):
            span = " ".join(words[i: i + n])
            if words[i] and words[i + n - 1] and len(span) >= 3 and name_key(span) in names:
                spans.append(span)
                i += n
                break
        else:
            i += 1
    return spans


class RulesV1Policy:
    text_protocol = False
    client = None  # makes no model call

    def __init__(self, toolbox: ArkV1Toolbox, type_words: dict[str, list[str]], search_size: int = 10,
                 expand: int = 2, max_answer: int = 20):
        self.toolbox, self.type_words = toolbox, graph_type_words(type_words, toolbox.graph.node_type_names)
        self.search_size, self.expand, self.max_answer = search_size, expand, max_answer

    def session(self, query: str, agent: int, T_max: int | None = None) -> "_Session":
        return _Session(self, query, T_max)


class _Session:
    def __init__(self, policy: RulesV1Policy, query: str, T_max: int | None = None):
        self.p, self.query, self.T_max = policy, query, T_max
        self.target = answer_type(query, policy.type_words)
        self.phase = "find"
        self.steps = self.n_calls = 0
        self.hop = 0  # 0: from the anchors; 1: from the intermediate nodes
        self.sources: list[int] = []
        self.asked: list[int] = []  # the source node of each get_triples call of the last step, in order
        self.reached: Counter = Counter()  # answer-type node -> how many sources reach it

    def _reply(self, calls: list[tuple[str, dict]]) -> LLMResult:
        reply = scripted_reply(calls, self.n_calls)
        self.n_calls += len(calls)
        return reply

    def _links(self, v: int) -> dict[tuple[str, str], int]:
        """(relation, neighbor type) -> count at node v: what ``get_relations`` shows."""
        g = self.p.toolbox.graph
        sl = g.neighbors(v)
        nbr, rel = np.asarray(g.nbr[sl]), np.asarray(g.rel[sl])
        keep = nbr != v
        return Counter((g.relation_names[r], g.node_type_names[t])
                       for r, t in zip(rel[keep].tolist(), g.node_type[nbr[keep]].tolist()))

    def _reach(self, observations, keep) -> Counter:
        """Node -> how many distinct sources of the last get_triples calls reach it, in first-seen order."""
        seen = {}
        for source, o in zip(self.asked, observations):
            for v in o.nodes:
                if keep(v):
                    seen.setdefault(v, set()).add(source)
        return Counter({v: len(s) for v, s in seen.items()})

    def _anchors(self) -> list[str]:
        tools, g = self.p.toolbox, self.p.toolbox.graph
        spans = []
        for sentence in SENTENCE_END.split(self.query):
            if NEGATED.match(sentence.strip()):
                continue
            for span in entity_spans(sentence, tools.names_index):
                ids = tools.names_index[name_key(span)]
                if any(g.type_name(v) != self.target for v in ids) and name_key(span) not in map(name_key, spans):
                    spans.append(span)
        return spans[: self.p.search_size]

    async def act(self, messages, observations) -> LLMResult:
        p, g = self.p, self.p.toolbox.graph
        self.steps += 1
        if self.T_max is not None and self.steps >= self.T_max:
            self.phase = "answer"
        if self.phase == "find":
            anchors = self._anchors()
            if anchors:
                self.phase = "relations"
                return self._reply([("find_entity", {"name": a}) for a in anchors])
            self.phase = "answer"
        if self.phase == "relations":
            # each anchor: the first node of that name that is not of the answer type
            self.sources = list(dict.fromkeys(
                next(v for v in o.nodes if g.type_name(v) != self.target)
                for o in observations if any(g.type_name(v) != self.target for v in o.nodes)))
            if self.sources:
                self.phase = "triples"
                return self._reply([("get_relations", {"node_index": v}) for v in self.sources])
            self.phase = "answer"
        if self.phase == "triples":
            links = {v: self._links(v) for v in self.sources}
            calls = [(v, r) for v in self.sources for (r, t) in links[v] if t == self.target]
            if not calls and self.hop == 0:  # one hop further: the other node type most anchors reach
                # each source's neighbor types in the order its links list them (not a set's hash order), so a
                # tie between types is broken the same way in every process
                types = Counter(t for v in self.sources for t in dict.fromkeys(t for (_, t) in links[v])
                                if t != g.type_name(v))
                if types:
                    via = types.most_common(1)[0][0]
                    calls = [(v, r) for v in self.sources for (r, t) in links[v] if t == via]
                    self.phase = "intermediate"
            elif calls:
                self.phase = "collect"
            if calls:
                calls = list(dict.fromkeys(calls))
                self.asked = [v for v, _ in calls]
                return self._reply([("get_triples", {"node_index": v, "relation": r}) for v, r in calls])
            self.phase = "answer"
        if self.phase == "intermediate":
            counts = self._reach(observations, lambda v: g.type_name(v) != self.target)
            self.sources = [v for v, _ in counts.most_common(p.expand)]
            self.hop, self.phase = 1, "triples"
            if self.sources:
                return self._reply([("get_relations", {"node_index": v}) for v in self.sources])
            self.phase = "answer"
        if self.phase == "collect":
            self.reached = self._reach(observations, lambda v: g.type_name(v) == self.target)
            self.phase = "answer"
        nodes = [v for v, _ in self.reached.most_common(p.max_answer)]  # most_common keeps first-seen order on ties
        calls = [("add_to_answer", {"answer_nodes": [{"node_index": v} for v in nodes]})] if nodes else []
        self.phase = "done"
        return self._reply(calls + [("finish", {})])
