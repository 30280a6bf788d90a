"""Policies decide an agent's next reply. ``policy.session(query, agent)`` gives one agent's session,
whose ``act(messages, observations)`` returns an ``LLMResult`` (assistant message + accounting).

- ``LLMPolicy``: any backbone through ``ark.llm.LLMClient``; agent i samples with seed ``seed + i``.
- ``RulesPolicy``: label-free; uses the same tools and writes the same messages: global search for the
  question, infer the answer type from the question's words, explore the neighborhoods of the top
  non-answer-type hits filtered to that type, add the answer-type nodes found (global hits first, then
  neighbors, interleaved by rank), finish. Deterministic at ``temperature`` 0 (the default). Above 0 each
  agent samples, from a generator seeded by (seed, agent, query text), so a run is reproducible whatever
  the concurrency: the global search size (``search_size`` times 2**u, u uniform in [-t, t]); how many hits
  it expands (``expand``, one fewer or one more with probability t/3 each, at least 1); which non-answer-type
  hits and in which order (Plackett-Luce over their ranks, logit -rank/t, i.e. a softmax over rank without
  replacement). So n agents give different but reasonable trajectories, and voting and multi-trajectory
  collection mean something. The answer list keeps the policy's ranking (``answer_order: ranked``) unless
  ``answer_order: sampled`` perturbs it the same way: noise a student cannot learn from the observations, and
  which made a distilled SmolLM2 loop over node ids instead of closing its answer list. Given the agent's step
  budget ``T_max`` (as the system prompt tells a model), it answers at its last step with what it has found, so a
  budget of 2 answers with the global hits alone (a budget of 3 or more never reaches that point).
  The answer types are the graph's own (``graph_type_words``).

With ``findings`` > 0, a question that follows a list of findings ("... presents with A, B, C. Not observed: D.
Which disease ...?") is explored finding by finding, as a clinician reads a case: the first reply searches the whole
question and each listed finding (its best node is the finding's anchor); the next explores each anchor's
neighborhood of the answer type, ranked by the whole question; a node scores by the anchors that reach it, each
anchor weighted by how specific it is (the log of the answer type's size over the anchor's neighbor count, as the
observation states it) times ``vote_weight``, plus its relevance to the question as an observation showed it. Where
the findings reach the answer type only through another type (``via``, e.g. genes through diseases), the best
``bridge`` nodes of that type are explored for the answer type and rank what they reach. A sampling agent keeps
each finding with probability 1 - t/4 (at least one).
Questions without such a list are explored as above, unchanged.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import json
import math
import random
import re

from ark.llm.result import LLMResult

if TYPE_CHECKING:
    from ark.tools.toolbox import Toolbox


class LLMPolicy:
    def __init__(self, client, toolbox: Toolbox, seed: int = 0):
        """``client``: an ``ark.llm.client.LLMClient``."""
        self.client, self.toolbox, self.seed = client, toolbox, seed
        self.text_protocol = client.backbone.tool_mode == "text"

    def session(self, query: str, agent: int, T_max: int | None = None) -> "_LLMSession":
        return _LLMSession(self, agent)


class _LLMSession:
    def __init__(self, policy: LLMPolicy, agent: int):
        self.policy, self.agent = policy, agent

    async def act(self, messages, observations) -> LLMResult:
        p = self.policy
        tools = None if p.text_protocol else p.toolbox.schemas()
        return await p.client.complete(messages, tools, agent_index=self.agent, seed=p.seed + self.agent)


ANSWER_ORDERS = ("ranked", "sampled")


def scripted_reply(calls: list[tuple[str, dict]], first_id: int) -> LLMResult:
    """A scripted policy's assistant message: the tool calls ``(name, arguments)``, numbered from ``first_id``."""
    return LLMResult({"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{first_id + i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(calls)]})


_NEGATED = ("not observed", "no ", "not ", "absent", "excluded", "without")


def case_findings(query: str) -> list[str]:
    """The findings a case description lists before its question: the comma-separated items after the first " with "
    of each statement ("A patient presents with A, B, C."), leaving out statements of absent findings ("Not
    observed: ..."). A fragment starting in lower case continues the item before it ("Intellectual disability,
    mild"). Statements end at ". " (a "." inside a token, as in "9q22.3", ends none); a text with no '?', no statement
    before its question or no " with " lists none. Linear in the text's length."""
    end = query.rfind("?")
    start = max(query.rfind(c + " ", 0, end) for c in ".?!") if end >= 0 else -1
    if start <= 0:
        return []
    found: list[str] = []
    for statement in query[:start + 1].split(". "):
        statement = statement.strip().rstrip(".")
        head, sep, listed = statement.partition(" with ")
        if not sep or head.lower().startswith(_NEGATED):
            continue
        for item in (f.strip() for f in listed.split(",")):
            if item and item[0].islower() and found:
                found[-1] += f", {item}"
            elif item:
                found.append(item)
    return list(dict.fromkeys(found))


ANCHOR_HITS = 5  # global hits looked at for a finding's anchor
# a node's line (ark.tools.toolbox): [id] type | "name" | source id (bare, or a JSON string) | score s | ...
_LINE_SCORE = re.compile(r'\[\d+\] [^|]*\| "(?:[^"\\]|\\.)*" \| (?:"(?:[^"\\]|\\.)*"|[^|"]*) \| '
                         r'score (-?\d+(?:\.\d+)?)')
_SHOWN = re.compile(r": showing \d+ of (\d+),")


def answer_type(query: str, type_words: dict[str, list[str]]) -> str | None:
    """The node type whose words appear earliest in the question sentence (None if none does).

    Only the last sentence ending in '?' is read when there is one: a case description before it
    ("... abnormal liver function ...") must not decide the answer type. (Found by ``rfind``: a regex for "the last
    sentence ending in '?'" is quadratic in the length of a text without one.)
    """
    end = query.rfind("?")
    text = (query[max(query.rfind(c, 0, end) for c in ".?!") + 1: end + 1] if end >= 0 else query).lower()
    best = None
    for type_name, words in type_words.items():
        for w in words:
            m = re.search(rf"\b{re.escape(w.lower())}", text)
            if m and (best is None or m.start() < best[0]):
                best = (m.start(), type_name)
    return best[1] if best else None


def graph_type_words(type_words: dict[str, list[str]], node_types: list[str]) -> dict[str, list[str]]:
    """The answer-type vocabulary on a graph with ``node_types``: ``type_words``' entries for the graph's own types,
    then every type they do not name with the words of its own name (``biological_process``: "biological process";
    ``gene/protein``: "gene", "protein"). An entry for a type the graph lacks is left out (``type_words`` is one
    vocabulary for BioKG and the STaRK graphs), so no call asks a graph for a type it does not have."""
    words = {t: list(w) for t, w in type_words.items() if t in node_types}
    for t in node_types:
        if t not in words:
            words[t] = [w for w in (part.replace("_", " ").strip() for part in t.split("/")) if w]
    return words


class RulesPolicy:
    text_protocol = False
    client = None  # makes no model call

    def __init__(self, toolbox: Toolbox, type_words: dict[str, list[str]], search_size: int = 10, expand: int = 2,
                 max_answer: int = 20, temperature: float = 0.0, seed: int = 0, answer_order: str = "ranked",
                 findings: int = 0, via: dict | None = None, bridge: int = 5,
                 vote_weight: float = 0.5):
        if answer_order not in ANSWER_ORDERS:
            raise ValueError(f"answer_order must be one of {', '.join(ANSWER_ORDERS)}, not {answer_order!r}")
        self.toolbox = toolbox
        self.answer_order = answer_order
        self.type_words = graph_type_words(type_words, toolbox.graph.node_type_names)
        self.search_size, self.expand, self.max_answer = search_size, expand, max_answer
        self.temperature, self.seed = temperature, seed
        types = toolbox.graph.node_type_names  # a bridge type the graph lacks is never asked for
        self.via = {t: v for t, v in (via or {}).items() if v in types}
        self.findings, self.bridge, self.vote_weight = findings, bridge, vote_weight

    def answer_type(self, query: str) -> str | None:
        return answer_type(query, self.type_words)

    def session(self, query: str, agent: int, T_max: int | None = None) -> "_RulesSession":
        # a string seed is hashed with sha512: the same stream in every process, whatever PYTHONHASHSEED is
        rng = random.Random(f"{self.seed}/{agent}/{query}") if self.temperature > 0 else None
        findings = case_findings(query) if self.findings else []
        if findings and self.toolbox.config.neighbors and self.answer_type(query) is not None:
            return _FindingsSession(self, query, findings[: self.findings], rng, T_max)
        return _RulesSession(self, query, rng, T_max)


def _sample_order(items: list, temperature: float, rng: random.Random) -> list:
    """Plackett-Luce over positions, logit -rank / temperature (Gumbel-max trick): a perturbed ranking."""
    keys = [-i / temperature - math.log(-math.log(1.0 - rng.random())) for i in range(len(items))]
    return [items[i] for i in sorted(range(len(items)), key=lambda i: -keys[i])]


class _RulesSession:
    def __init__(self, policy: RulesPolicy, query: str, rng: random.Random | None = None, T_max: int | None = None):
        self.p, self.query, self.rng, self.t, self.T_max = policy, query, rng, policy.temperature, T_max
        self.target = policy.answer_type(query)
        self.hits: list[int] = []
        self.phase = "search"
        self.n_calls = 0
        self.steps = 0

    def _reply(self, calls: list[tuple[str, dict]]) -> LLMResult:
        reply = scripted_reply(calls, self.n_calls)
        self.n_calls += len(calls)
        return reply

    def _next_step(self) -> bool:
        """Count a step; whether it is the agent's last."""
        self.steps += 1
        return self.T_max is not None and self.steps >= self.T_max

    def _question_search(self) -> tuple[str, dict]:
        """The global search for the whole question (its size sampled by a sampling agent)."""
        size = self.p.search_size
        if self.rng:
            size = max(1, round(size * 2 ** self.rng.uniform(-self.t, self.t)))
        return "search_in_graph", {"query": self.query, "size": min(size, self.p.toolbox.config.global_k_max)}

    def _answer(self, nodes: list[int]) -> LLMResult:
        """Add ``nodes`` (at most ``max_answer``; a sampling agent may perturb their order) and finish."""
        if self.rng and self.p.answer_order == "sampled":
            nodes = _sample_order(nodes, self.t, self.rng)
        nodes = nodes[: self.p.max_answer] or self.hits[:1]
        calls = [("add_to_answer", {"answer_nodes": [{"node_index": v} for v in nodes]})] if nodes else []
        self.phase = "done"
        return self._reply(calls + [("finish", {})])

    def _explore(self, nodes: list[int], node_type: str) -> LLMResult:
        """One reply exploring each node's neighborhood for ``node_type``, ranked by the question (as the tool set
        allows: no query or no type filter in those ablations)."""
        cfg = self.p.toolbox.config
        calls = []
        for v in nodes:
            args = {"node_index": v}
            if cfg.query_param:
                args["query"] = self.query
            if cfg.type_filters:
                args["node_type"] = node_type
            calls.append(("search_in_neighborhood", args))
        return self._reply(calls)

    async def act(self, messages, observations) -> LLMResult:
        p, g, cfg = self.p, self.p.toolbox.graph, self.p.toolbox.config
        last_step = self._next_step()
        if self.phase == "search":
            self.phase = "expand"
            return self._reply([self._question_search()])
        if self.phase == "expand":
            self.hits = observations[0].nodes if observations else []
            sources = [v for v in self.hits if g.type_name(v) != self.target]
            n = p.expand
            if self.rng:
                step = min(self.t, 1.0) / 3
                n = max(1, n + self.rng.choices([-1, 0, 1], [step, 1 - 2 * step, step])[0]) if n else 0
                sources = _sample_order(sources, self.t, self.rng)
            sources = sources[:n]
            if sources and cfg.neighbors and self.target is not None and not last_step:
                self.phase = "answer"
                return self._explore(sources, self.target)
            observations = []
        # answer and finish in one reply
        typed = [v for v in self.hits if self.target is None or g.type_name(v) == self.target]
        ranked = [o.nodes for o in observations if o.error is None]
        interleaved = [lst[i] for i in range(max(map(len, ranked), default=0)) for lst in ranked if i < len(lst)]
        nodes = list(dict.fromkeys(typed + [v for v in interleaved
                                            if self.target is None or g.type_name(v) == self.target]))
        return self._answer(nodes)


class _FindingsSession(_RulesSession):
    """A case read finding by finding (``RulesPolicy`` with ``findings``): search the question and each finding,
    explore the anchors' neighborhoods (through ``via`` where the answer type is not next to them), score, answer."""

    def __init__(self, policy: RulesPolicy, query: str, findings: list[str], rng: random.Random | None = None,
                 T_max: int | None = None):
        super().__init__(policy, query, rng, T_max)
        if rng:
            keep = [f for f in findings if rng.random() >= self.t / 4]
            findings = keep or findings[:1]
        self.findings = findings
        self.via = policy.via.get(self.target)
        self.relevance: dict[int, float] = {}  # a node's relevance to the question, as an observation showed it
        self.votes: dict[int, float] = {}  # the specificity of the explored nodes whose neighborhoods show it

    def _read(self, observations, node_type: str) -> None:
        """Add what ``observations`` show of the nodes of ``node_type``: their scores (relevance), and for a
        neighborhood, its center's specificity (log of the type's size over the center's neighbor count of that
        type, as the observation's first line states it) to each node it shows (votes)."""
        g = self.p.toolbox.graph
        size = g.counts_by_type().get(node_type, 0)
        for obs in observations:
            if obs.error is not None:
                continue
            shown = _SHOWN.search(obs.text.partition("\n")[0])
            specific = math.log((size + 1) / (int(shown.group(1)) + 1)) + 1.0 if shown else 0.0
            for v in obs.nodes:
                if g.type_name(v) != node_type:
                    continue
                score = _score_of(obs.text, v)
                if score is not None:
                    self.relevance[v] = max(self.relevance.get(v, score), score)
                self.votes[v] = self.votes.get(v, 0.0) + specific

    def _ranked(self, node_type: str) -> list[int]:
        g, w = self.p.toolbox.graph, self.p.vote_weight
        nodes = [v for v in dict.fromkeys([*self.relevance, *self.votes]) if g.type_name(v) == node_type]
        total = {v: self.relevance.get(v, 0.0) + w * self.votes.get(v, 0.0) for v in nodes}
        return sorted(nodes, key=lambda v: -total[v])

    async def act(self, messages, observations) -> LLMResult:
        p, g = self.p, self.p.toolbox.graph
        last_step = self._next_step()
        if self.phase == "search":
            self.phase = "anchors"
            return self._reply([self._question_search()]
                               + [("search_in_graph", {"query": f, "size": ANCHOR_HITS}) for f in self.findings])
        if self.phase == "anchors":
            self.hits = observations[0].nodes if observations else []
            for node_type in dict.fromkeys([self.target, self.via or self.target]):
                self._read(observations[:1], node_type)
            # a finding's anchor: the hit named as the finding is, else its best hit; never of the answer type (a
            # finding describes the case, it is not an answer)
            anchors = []
            for finding, obs in zip(self.findings, observations[1:]):
                hits = [v for v in (obs.nodes if obs.error is None else []) if g.type_name(v) != self.target]
                named = [v for v in hits if str(g.name[v]).lower() == finding.lower()]
                anchors += (named or hits)[:1]
            anchors = list(dict.fromkeys(anchors))
            if anchors and not last_step:
                self.phase = "bridge" if self.via else "answer"
                return self._explore(anchors, self.via or self.target)
        elif self.phase == "bridge":
            self._read(observations, self.via)
            best = self._ranked(self.via)[: p.bridge]
            if best and not last_step:
                self.phase = "answer"
                self.bridged = best
                return self._explore(best, self.target)
        elif self.phase == "answer":
            if self.via:  # a node of the answer type ranks by the best-ranked explored node it neighbors
                reached: dict[int, float] = {}
                for rank, obs in zip(range(len(self.bridged)), observations):
                    for v in (obs.nodes if obs.error is None else []):
                        if g.type_name(v) == self.target and v not in reached:
                            reached[v] = float(len(self.bridged) - rank)
                if reached:  # else the question's own hits of the answer type stand
                    self.relevance, self.votes = {}, reached
            else:
                self._read(observations, self.target)
        nodes = self._ranked(self.target)
        return self._answer(nodes)


def _score_of(text: str, v: int) -> float | None:
    """The score an observation line shows for node ``v`` (None if it shows none)."""
    at = text.find(f"\n[{v}] ")
    if at < 0:
        return None
    line = text[at + 1: text.find("\n", at + 1) if text.find("\n", at + 1) > 0 else len(text)]
    m = _LINE_SCORE.match(line)
    return float(m.group(1)) if m else None
