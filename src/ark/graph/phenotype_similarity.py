"""Phenotype-driven diagnosis without an agent: rank a graph's diseases by the semantic similarity between a case's
HPO terms and each disease's annotations (the Phenomizer approach, Köhler et al. 2009), and genes through their
diseases. Everything comes from the graph the agents use: the HPO hierarchy (``is_a`` edges between ``HP:`` nodes),
the disease annotations (``phenotype present``) and the gene links (``associated with``), so on the
leave-publication-out graph it sees only the annotations that survive.

The information content of a term is ``-log`` of the share of annotated diseases whose annotations (closed under
``is_a``) include it. A case's score for a disease averages, over the case's terms, the information content of the
most informative ancestor the term shares with the disease's annotations (Resnik's similarity, best match per case
term: the asymmetric query-to-disease score of the Phenomizer).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp


if TYPE_CHECKING:
    from ark.graph.graph import Graph


class PhenotypeSimilarity:
    def __init__(self, graph: Graph):
        rel = {name: i for i, name in enumerate(graph.relation_names)}
        src, dst, edge_rel = np.asarray(graph.src), np.asarray(graph.dst), np.asarray(graph.edge_rel)
        keys = np.asarray(graph.key).astype(str)
        self.num_nodes = graph.num_nodes
        self.term_of_key = {k: i for i, k in enumerate(keys) if k.startswith("HP:")}
        is_a = edge_rel == rel["is_a"]
        parents = sp.csr_matrix((np.ones(int(is_a.sum())), (src[is_a], dst[is_a])), shape=(self.num_nodes,) * 2)
        self.ancestors = _closure(parents)  # node x node: itself and every ancestor
        annotated = edge_rel == rel["phenotype present"]
        annotations = sp.csr_matrix((np.ones(int(annotated.sum())), (src[annotated], dst[annotated])),
                                    shape=(self.num_nodes,) * 2)
        self.diseases = np.unique(src[annotated])
        # disease x term: the annotations closed under is_a (CSC: the diseases of a term, by column)
        self.closed = ((annotations[self.diseases] @ self.ancestors) > 0).astype(np.int8).tocsc()
        share = np.asarray(self.closed.sum(axis=0)).ravel() / max(len(self.diseases), 1)
        self.ic = np.where(share > 0, -np.log(np.where(share > 0, share, 1.0)), 0.0)
        gene_link = edge_rel == rel["associated with"]
        self.genes_of = sp.csr_matrix((np.ones(int(gene_link.sum())), (dst[gene_link], src[gene_link])),
                                      shape=(self.num_nodes,) * 2)  # disease x gene

    def disease_scores(self, term_keys: list[str]) -> np.ndarray:
        """Per node: the case's similarity to each annotated disease (0 elsewhere); terms not in the graph count
        for nothing."""
        terms = [self.term_of_key[k] for k in dict.fromkeys(term_keys) if k in self.term_of_key]
        scores = np.zeros(self.num_nodes)
        if not terms:
            return scores
        total = np.zeros(len(self.diseases))
        for t in terms:
            ancestors = self.ancestors[t].indices
            best = np.zeros(len(self.diseases))
            for a in ancestors[np.argsort(-self.ic[ancestors], kind="stable")]:  # most informative first
                col = self.closed.indices[self.closed.indptr[a]:self.closed.indptr[a + 1]]
                fresh = col[best[col] == 0]
                best[fresh] = self.ic[a]
            total += best
        scores[self.diseases] = total / len(terms)
        return scores

    def rank(self, term_keys: list[str], target: str, depth: int) -> tuple[list[int], list[float]]:
        """The top ``depth`` diseases (``target="disease"``) or genes (each scored by its best disease), best first,
        ties by node id; only nodes with a positive score."""
        scores = self.disease_scores(term_keys)
        if target == "gene":
            linked = self.genes_of.multiply(scores[:, None]).tocsc()  # disease x gene, weighted by disease score
            scores = np.asarray(linked.max(axis=0).todense()).ravel()
        ids = np.flatnonzero(scores > 0)
        order = ids[np.lexsort((ids, -scores[ids]))][:depth]
        return order.tolist(), [round(float(s), 4) for s in scores[order]]


def _closure(parents: sp.csr_matrix) -> sp.csr_matrix:
    """Reflexive-transitive closure of a DAG's parent matrix (boolean, CSR)."""
    reach = (sp.identity(parents.shape[0], format="csr") + parents).astype(bool).astype(np.int8)
    while True:
        grown = ((reach @ reach) > 0).astype(np.int8)
        if grown.nnz == reach.nnz:
            return grown.tocsr()
        reach = grown
