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
"""
from __future__ import annotations

import json
import math
import random
import re

from ark.llm.result import LLMResult
from ark.tools.toolbox import Toolbox


class LLMPolicy:
    def __init__(self, client, toolbox: Toolbox, seed: int = 0):
        """``client``: an ``ark.llm.client.LLMClient``."""
        self.client, self.toolbox, self.seed = client, toolbox, seed
        self.text_protocol = client.backbone.tool_mode == "text"

    def session(self, query: str, agent: int) -> "_LLMSession":
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


class RulesPolicy:
    text_protocol = False
    client = None  # makes no model call

    def __init__(self, toolbox: Toolbox, type_words: dict[str, list[str]], search_size: int = 10, expand: int = 2,
                 max_answer: int = 20, temperature: float = 0.0, seed: int = 0, answer_order: str = "ranked",
                 T_max: int | None = None):
        if answer_order not in ANSWER_ORDERS:
            raise ValueError(f"answer_order must be one of {', '.join(ANSWER_ORDERS)}, not {answer_order!r}")
        self.toolbox = toolbox
        self.answer_order = answer_order
        self.type_words = type_words
        self.search_size, self.expand, self.max_answer = search_size, expand, max_answer
        self.temperature, self.seed = temperature, seed
        self.T_max = T_max

    def answer_type(self, query: str) -> str | None:
        return answer_type(query, self.type_words)

    def session(self, query: str, agent: int) -> "_RulesSession":
        # a string seed is hashed with sha512: the same stream in every process, whatever PYTHONHASHSEED is
        rng = random.Random(f"{self.seed}/{agent}/{query}") if self.temperature > 0 else None
        return _RulesSession(self, query, rng)


def _sample_order(items: list, temperature: float, rng: random.Random) -> list:
    """Plackett-Luce over positions, logit -rank / temperature (Gumbel-max trick): a perturbed ranking."""
    keys = [-i / temperature - math.log(-math.log(1.0 - rng.random())) for i in range(len(items))]
    return [items[i] for i in sorted(range(len(items)), key=lambda i: -keys[i])]


class _RulesSession:
    def __init__(self, policy: RulesPolicy, query: str, rng: random.Random | None = None):
        self.p, self.query, self.rng, self.t = policy, query, rng, policy.temperature
        self.target = policy.answer_type(query)
        self.hits: list[int] = []
        self.phase = "search"
        self.n_calls = 0
        self.steps = 0

    def _reply(self, calls: list[tuple[str, dict]]) -> LLMResult:
        reply = scripted_reply(calls, self.n_calls)
        self.n_calls += len(calls)
        return reply

    async def act(self, messages, observations) -> LLMResult:
        p, g, cfg = self.p, self.p.toolbox.graph, self.p.toolbox.config
        self.steps += 1
        last_step = p.T_max is not None and self.steps >= p.T_max
        if self.phase == "search":
            self.phase = "expand"
            size = p.search_size
            if self.rng:
                size = max(1, round(size * 2 ** self.rng.uniform(-self.t, self.t)))
            return self._reply([("search_in_graph", {"query": self.query, "size": min(size, cfg.global_k_max)})])
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
                calls = []
                for v in sources:
                    args = {"node_index": v}
                    if cfg.query_param:
                        args["query"] = self.query
                    if cfg.type_filters:
                        args["node_type"] = self.target
                    calls.append(("search_in_neighborhood", args))
                return self._reply(calls)
            observations = []
        # answer and finish in one reply
        typed = [v for v in self.hits if self.target is None or g.type_name(v) == self.target]
        ranked = [o.nodes for o in observations if o.error is None]
        interleaved = [lst[i] for i in range(max(map(len, ranked), default=0)) for lst in ranked if i < len(lst)]
        nodes = list(dict.fromkeys(typed + [v for v in interleaved
                                            if self.target is None or g.type_name(v) == self.target]))
        if self.rng and p.answer_order == "sampled":
            nodes = _sample_order(nodes, self.t, self.rng)
        nodes = nodes[: p.max_answer] or self.hits[:1]
        calls = [("add_to_answer", {"answer_nodes": [{"node_index": v} for v in nodes]})] if nodes else []
        self.phase = "done"
        return self._reply(calls + [("finish", {})])
