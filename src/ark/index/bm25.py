"""BM25 relevance over node documents with bm25s.

bm25s keeps, per vocabulary term, a posting list of (document id, precomputed BM25 term score)
in CSC form. Global search sums the posting lists of the query terms over the whole corpus;
neighborhood scoring intersects each posting list with the sorted neighbor ids instead, so it
costs O(|query terms| * log(postings)) per neighbor set and uses the same global statistics
(idf, average document length): a neighbor scores exactly as it would in a global search.
"""
from __future__ import annotations

import json
from pathlib import Path

import bm25s
import numpy as np
import Stemmer

from ark.errors import UserError
from ark.index.topk import top_k


class BM25Index:
    def __init__(self, retriever: bm25s.BM25, stopwords: str, stemmer: str | None):
        self.retriever = retriever
        self.stopwords = stopwords
        self.stemmer_name = stemmer
        self._stemmer = Stemmer.Stemmer(stemmer) if stemmer else None
        s = retriever.scores
        self.data, self.indices, self.indptr = s["data"], s["indices"], s["indptr"]
        self.num_docs = int(s["num_docs"])

    # ------------------------------------------------------------------ build / io
    @classmethod
    def build(cls, docs, k1: float = 1.2, b: float = 0.75, method: str = "lucene",
              stopwords: str = "en", stemmer: str | None = "english") -> "BM25Index":
        stem = Stemmer.Stemmer(stemmer) if stemmer else None
        tokens = _sorted_vocabulary(bm25s.tokenize(list(docs), stopwords=stopwords, stemmer=stem, show_progress=False))
        retriever = bm25s.BM25(k1=k1, b=b, method=method)
        retriever.index(tokens, show_progress=False)
        retriever.vocab_dict = dict(sorted(retriever.vocab_dict.items(), key=lambda item: item[1]))  # saved as is
        _sort_postings(retriever.scores)
        return cls(retriever, stopwords, stemmer)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        self.retriever.save(str(directory))
        (directory / "ark_bm25.json").write_text(json.dumps({"stopwords": self.stopwords, "stemmer": self.stemmer_name}))

    @classmethod
    def load(cls, directory: str | Path, mmap: bool = True) -> "BM25Index":
        directory = Path(directory)
        if not (directory / "ark_bm25.json").exists():
            raise UserError(f"no BM25 index at {directory} (run the build_index stage)")
        cfg = json.loads((directory / "ark_bm25.json").read_text())
        retriever = bm25s.BM25.load(str(directory), mmap=mmap)
        return cls(retriever, cfg["stopwords"], cfg["stemmer"])

    # ------------------------------------------------------------------ scoring
    def term_ids(self, query: str) -> np.ndarray:
        """Distinct vocabulary ids of the query's terms (unknown terms dropped)."""
        if not query or not query.strip():
            return np.zeros(0, dtype=np.int64)
        words = bm25s.tokenize([query], stopwords=self.stopwords, stemmer=self._stemmer,
                               return_ids=False, show_progress=False)[0]
        vocab = self.retriever.vocab_dict
        return np.array(sorted({vocab[w] for w in words if w in vocab}), dtype=np.int64)

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k highest-scoring documents with score > 0, best first (ties by smaller id)."""
        terms = self.term_ids(query)
        if len(terms) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = np.zeros(self.num_docs, dtype=np.float32)
        for t in terms:
            lo, hi = self.indptr[t], self.indptr[t + 1]
            scores[self.indices[lo:hi]] += self.data[lo:hi]
        return top_k(scores, k)

    def score(self, query: str, ids: np.ndarray) -> np.ndarray:
        """BM25 scores of the documents ``ids`` (sorted ascending, unique) for ``query``."""
        ids = np.asarray(ids)
        scores = np.zeros(len(ids), dtype=np.float32)
        for t in self.term_ids(query):
            lo, hi = int(self.indptr[t]), int(self.indptr[t + 1])
            postings = self.indices[lo:hi]
            pos = np.searchsorted(postings, ids)
            pos[pos == len(postings)] = 0
            hit = postings[pos] == ids if len(postings) else np.zeros(len(ids), bool)
            scores[hit] += self.data[lo:hi][pos[hit]]
        return scores


def _sort_postings(scores: dict) -> None:
    """Make every posting list sorted by document id (the intersection relies on it)."""
    indptr, indices, data = scores["indptr"], scores["indices"], scores["data"]
    for t in range(len(indptr) - 1):
        lo, hi = indptr[t], indptr[t + 1]
        seg = indices[lo:hi]
        if hi - lo > 1 and np.any(seg[1:] < seg[:-1]):
            order = np.argsort(seg, kind="stable")
            indices[lo:hi] = seg[order]
            data[lo:hi] = data[lo:hi][order]


def _sorted_vocabulary(tokens):
    """Renumber the terms in sorted order: bm25s numbers stemmed terms in ``set`` order, which changes with
    Python's hash seed, so the same documents would give a different index file in every process."""
    terms = sorted(tokens.vocab, key=tokens.vocab.get)  # terms by their current id
    order = sorted(range(len(terms)), key=terms.__getitem__)
    new_id = np.empty(len(terms), dtype=np.int64)
    new_id[order] = np.arange(len(terms))
    ids = [new_id[np.asarray(doc, dtype=np.int64)].tolist() for doc in tokens.ids]
    return type(tokens)(ids=ids, vocab={t: int(new_id[i]) for i, t in enumerate(terms)})
