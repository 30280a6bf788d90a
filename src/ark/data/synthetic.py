"""STaRK-style synthetic queries on BioKG with exact gold (biokg-sources.md §5).

Each template is a typed pattern of 1-3 relational constraints ending at the answer type. A query
is made answer-first (a random answer node, then anchors among its neighbors), so gold is never
empty; gold is then computed exactly as the intersection of the anchors' adjacency sets. At least
one anchor (the *textual anchor*) is named only by text its document holds (the first sentence of
its definition, a synonym, or a gene's full name), never by its label. Splits hold out whole textual
anchors: a textual anchor seen in train never appears in val or test.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ark.data.queries import SPLITS, require_fractions, require_int, split_of
from ark.data import QuerySet
from ark.errors import UserError
from ark.graph.graph import IN, OUT

if TYPE_CHECKING:
    from ark.graph.graph import Graph


@dataclass
class Constraint:
    anchor: int
    relation: str
    direction: int  # direction of the edge as seen from the anchor


class _Adjacency:
    def __init__(self, graph: Graph):
        self.g = graph
        self.rel = {r: i for i, r in enumerate(graph.relation_names)}
        self.types = {t: i for i, t in enumerate(graph.node_type_names)}

    def of(self, v: int, relation: str, direction: int, node_type: str | None = None) -> np.ndarray:
        """Neighbors of v through `relation` in `direction` (as seen from v), optionally of one type."""
        g, sl = self.g, self.g.neighbors(v)
        nbr = np.asarray(g.nbr[sl])
        keep = (np.asarray(g.rel[sl]) == self.rel[relation]) & (np.asarray(g.out[sl]) == direction)
        if node_type is not None:
            keep &= g.node_type[nbr] == self.types[node_type]
        return np.unique(nbr[keep])

    def gold(self, constraints: list[Constraint], answer_type: str) -> np.ndarray:
        sets = [self.of(c.anchor, c.relation, c.direction, answer_type) for c in constraints]
        gold = sets[0]
        for s in sets[1:]:
            gold = np.intersect1d(gold, s)
        return gold, sets


def first_sentence(text: str, max_chars: int = 180) -> str:
    s = re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0].rstrip(".")
    return s if len(s) <= max_chars else ""


class SyntheticQueryMaker:
    def __init__(self, graph: Graph, cfg):
        self.g = graph
        self.adj = _Adjacency(graph)
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.anchor_uses: Counter = Counter()
        self.by_type = {t: np.flatnonzero(graph.node_type == i) for i, t in enumerate(graph.node_type_names)}
        self.dropped: Counter = Counter()  # generated queries thrown away (and replaced), by reason
        self._definition_counts = Counter(
            first_sentence(graph.node_fields(v).get("definition", "")).lower() for v in range(graph.num_nodes)
        )

    # ------------------------------------------------------------------ textual anchors
    def describe(self, v: int) -> str | None:
        """A description of v that avoids its label: a unique definition sentence or a synonym."""
        f, label = self.g.node_fields(v), str(self.g.name[v]).lower()
        options = []
        d = first_sentence(f.get("definition", ""))
        if d and self._definition_counts[d.lower()] == 1 and label not in d.lower():
            options.append(f"'{d}'")
        options += [f"'{s}'" for s in f.get("synonyms", []) if s.lower() != label and len(s) > 3]
        if "full name" in f and f["full name"].lower() != label:
            options.append(f"the gene whose full name is '{f['full name']}'")
        return str(self.rng.choice(options)) if options else None

    def pick(self, ids: np.ndarray) -> int | None:
        ids = [int(v) for v in ids if self.anchor_uses[int(v)] < self.cfg.max_anchor_uses]
        return int(self.rng.choice(ids)) if ids else None

    # ------------------------------------------------------------------ templates
    def t_gene_disease_process(self):
        """genes associated with disease D and involved in process X (X by text)."""
        gene = int(self.rng.choice(self.by_type["gene/protein"]))
        d = self.pick(self.adj.of(gene, "associated with", OUT, "disease"))
        x = self.pick(self.adj.of(gene, "involved in", OUT, "biological_process"))
        if d is None or x is None:
            return None
        text = self.describe(x)
        if text is None:
            return None
        cons = [Constraint(d, "associated with", IN), Constraint(x, "involved in", IN)]
        q = f"Which genes associated with {self.g.name[d]} take part in the biological process {text}?"
        return q, cons, "gene/protein", x

    def t_disease_phenotypes(self):
        """diseases with phenotype P1 (by text) and P2 [and inheritance M]."""
        dis = int(self.rng.choice(self.by_type["disease"]))
        phen = self.adj.of(dis, "phenotype present", OUT, "effect/phenotype")
        if len(phen) < 2:
            return None
        p1, p2 = self.pick(phen), self.pick(phen)
        if p1 is None or p2 is None or p1 == p2:
            return None
        text = self.describe(p1)
        if text is None:
            return None
        cons = [Constraint(p1, "phenotype present", IN), Constraint(p2, "phenotype present", IN)]
        q = f"Which diseases show {text} together with {str(self.g.name[p2]).lower()}"
        modes = self.adj.of(dis, "inheritance", OUT)
        if len(modes) and self.rng.random() < 0.5:
            m = int(self.rng.choice(modes))
            cons.append(Constraint(m, "inheritance", IN))
            q += f", with {str(self.g.name[m]).lower()}"
        return q + "?", cons, "disease", p1

    def t_shared_phenotypes(self):
        """phenotypes of both D1 and D2 that are a kind of parent term T (T by text)."""
        p = int(self.rng.choice(self.by_type["effect/phenotype"]))
        dis = self.adj.of(p, "phenotype present", IN, "disease")
        parents = self.adj.of(p, "is_a", OUT, "effect/phenotype")
        if len(dis) < 2 or not len(parents):
            return None
        d1, d2, t = self.pick(dis), self.pick(dis), self.pick(parents)
        if None in (d1, d2, t) or d1 == d2:
            return None
        text = self.describe(t)
        if text is None:
            return None
        cons = [Constraint(d1, "phenotype present", OUT), Constraint(d2, "phenotype present", OUT),
                Constraint(t, "is_a", IN)]
        q = (f"Which clinical features seen in both {self.g.name[d1]} and {self.g.name[d2]} "
             f"are a kind of {text}?")
        return q, cons, "effect/phenotype", t

    def t_gene_functions(self):
        """molecular functions enabled by a gene named by its full name."""
        f = int(self.rng.choice(self.by_type["molecular_function"]))
        gene = self.pick(self.adj.of(f, "enables", IN, "gene/protein"))
        if gene is None:
            return None
        full = self.g.node_fields(gene).get("full name")
        if not full or full.lower() == str(self.g.name[gene]).lower():
            return None
        cons = [Constraint(gene, "enables", OUT)]
        q = f"What molecular functions does the gene encoding '{full}' enable?"
        return q, cons, "molecular_function", gene

    TEMPLATES = ("t_gene_disease_process", "t_disease_phenotypes", "t_shared_phenotypes", "t_gene_functions")

    # ------------------------------------------------------------------ driver
    def leak(self, query: str, gold: np.ndarray, text_anchor: int) -> str | None:
        """Why the text gives the answer or the textual anchor away (None if it does not): a gold answer's
        name, or the textual anchor's own label (a synonym can contain it), as a whole phrase."""
        text = query.lower()

        def named(v: int) -> bool:
            return re.search(rf"(?<!\w){re.escape(str(self.g.name[v]).lower())}(?!\w)", text) is not None

        if any(named(int(v)) for v in gold):
            return "gold_name_in_text"
        if named(text_anchor):
            return "anchor_label_in_text"
        return None

    def accept(self, cons: list[Constraint], answer_type: str):
        gold, sets = self.adj.gold(cons, answer_type)
        if not self.cfg.min_answers <= len(gold) <= self.cfg.max_answers:
            return None
        if len(cons) > 1:
            if max(len(s) for s in sets) < self.cfg.min_candidates:
                return None  # one constraint alone must leave many candidates, so all of them matter
            if any(len(s) == len(gold) for s in sets):
                return None  # every constraint must cut the candidates
        return gold

    def make(self) -> dict[str, list[dict]]:
        per_template = self.cfg.n_queries // len(self.TEMPLATES)
        out = {s: [] for s in SPLITS}
        seen = set()
        for name in self.TEMPLATES:
            made, attempts = 0, 0
            while made < per_template and attempts < per_template * 300:
                attempts += 1
                sample = getattr(self, name)()
                if sample is None:
                    continue
                query, cons, answer_type, text_anchor = sample
                if query in seen:
                    continue
                gold = self.accept(cons, answer_type)
                if gold is None:
                    continue
                leak = self.leak(query, gold, text_anchor)
                if leak is not None:
                    self.dropped[leak] += 1
                    continue
                seen.add(query)
                for c in cons:
                    self.anchor_uses[c.anchor] += 1
                split = split_of(str(self.g.key[text_anchor]), self.cfg.split_fractions)
                out[split].append({
                    "id": f"{name[2:]}-{made:05d}",
                    "query": query,
                    "answer_ids": [int(v) for v in gold],
                    "meta": {"template": name[2:], "answer_type": answer_type,
                             "anchors": [str(self.g.key[c.anchor]) for c in cons],
                             "textual_anchor": str(self.g.key[text_anchor])},
                })
                made += 1
        return out


def make_synthetic_queries(graph: Graph, cfg) -> tuple[dict[str, list[dict]], dict]:
    """(splits, stats): ``stats["dropped"]`` counts the generated queries replaced because their text named a
    gold answer or the textual anchor's label."""
    for name, least in (("n_queries", 1), ("seed", 0), ("min_answers", 1), ("max_answers", 1),
                        ("min_candidates", 0), ("max_anchor_uses", 1)):
        require_int(f"queries.{name}", getattr(cfg, name), least)
    if cfg.min_answers > cfg.max_answers:
        raise UserError(f"queries.min_answers ({cfg.min_answers}) exceeds queries.max_answers ({cfg.max_answers})")
    require_fractions("queries.split_fractions", cfg.split_fractions)
    maker = SyntheticQueryMaker(graph, cfg)
    splits = maker.make()
    return splits, {"dropped": dict(sorted(maker.dropped.items()))}


@dataclass(kw_only=True)
class SyntheticQueries(QuerySet):
    """STaRK-style relational questions on a graph, with exact gold (``make_synthetic_queries``)."""

    kind: ClassVar[str] = "synthetic"

    n_queries: int
    seed: int = 0
    min_answers: int = 1
    max_answers: int = 10
    min_candidates: int = 20
    max_anchor_uses: int = 3
    split_fractions: list = field(default_factory=lambda: [0.6, 0.2, 0.2])

    def make(self, dataset) -> tuple[dict[str, list[dict]], dict]:
        from ark.graph import load_graph

        return make_synthetic_queries(load_graph(dataset), self)
