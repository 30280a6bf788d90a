"""BM25 relevance over node documents with bm25s.

bm25s keeps, per vocabulary term, a posting list of (document id, precomputed BM25 term score)
in CSC form. Global search sums the posting lists of the query terms (pruning the common terms' lists
where they cannot change the top k); neighborhood scoring intersects each posting list with the sorted
neighbor ids instead, searching the shorter list in the longer one, and uses the same global statistics
(idf, average document length): a neighbor scores exactly as it would in a global search.

The index is built as bm25s builds it, byte for byte, but in chunks of documents straight to term ids
(``build``): bm25s's own tokeniser holds every token of the corpus as a Python object.
"""
from __future__ import annotations

import json
import re
import threading
from itertools import chain
from pathlib import Path

import bm25s
import numpy as np
import pandas as pd
import scipy.sparse as sp
import Stemmer
from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer
from bm25s.tokenization import _infer_stopwords

from ark.errors import UserError
from ark.index.topk import top_k

TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s.tokenize's default
TABLE_MIN_IDS = 16_384  # documents to score from which a term with a long posting list is looked up in a table
COMMON_POSTINGS = 4096  # a query term in more documents than this (and 1/64 of them) is pruned when it can be


class BM25Index:
    name = "BM25"

    def __init__(self, retriever: bm25s.BM25, stopwords: str, stemmer: str | None):
        self.retriever = retriever
        self.stopwords = stopwords
        self.stemmer_name = stemmer
        self._stemmer = Stemmer.Stemmer(stemmer) if stemmer else None
        s = retriever.scores
        # plain arrays over the (memory-mapped) files: slicing a np.memmap costs microseconds a slice
        self.data, self.indices, self.indptr = (np.asarray(s[a]).view(np.ndarray) for a in ("data", "indices", "indptr"))
        self._split = re.compile(TOKEN_PATTERN).findall
        self._stop = frozenset(_infer_stopwords(stopwords))
        self.num_docs = int(s["num_docs"])
        self._max_scores: dict[int, float] = {}
        self._tables = threading.local()

    # ------------------------------------------------------------------ build / io
    @classmethod
    def build(cls, docs, k1: float = 1.2, b: float = 0.75, method: str = "lucene",
              stopwords: str = "en", stemmer: str | None = "english", chunk_docs: int = 2000) -> "BM25Index":
        """The index bm25s would build from ``bm25s.tokenize`` and ``BM25.index`` (byte for byte, with terms
        numbered in sorted order), built in chunks of documents straight to term ids and counted with numpy
        and scipy, so that neither the tokenised corpus nor a Python object per token is ever held."""
        stem = Stemmer.Stemmer(stemmer) if stemmer else None
        counts, doc_len, stems = _count_terms(docs, stopwords, stem, chunk_docs)
        order = sorted(range(len(stems)), key=stems.__getitem__)  # sorted term ids, as _sorted_vocabulary did
        new_id = np.empty(len(stems), dtype=np.int32)
        new_id[order] = np.arange(len(stems), dtype=np.int32)
        counts.indices = new_id[counts.indices]
        retriever = bm25s.BM25(k1=k1, b=b, method=method)
        retriever.scores = _bm25_scores(retriever, counts, doc_len)
        retriever.vocab_dict = {stems[t]: i for i, t in enumerate(order)}
        retriever.vocab_dict[""] = len(stems)  # bm25s's empty token, scored for no document
        retriever.unique_token_ids_set = set(retriever.vocab_dict.values())
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
        """Distinct vocabulary ids of the query's terms (unknown terms dropped), tokenised as ``build`` does."""
        words = [w for w in self._split(query.lower()) if w not in self._stop] if query else []
        if self._stemmer is not None:
            words = self._stemmer.stemWords(words)
        vocab = self.retriever.vocab_dict
        return np.array(sorted({vocab[w] for w in words if w in vocab}), dtype=np.int64)

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k highest-scoring documents with score > 0, best first (ties by smaller id).

        Query pruning (MaxScore): the documents of the query's rarer terms are scored exactly; when the common
        terms' largest scores summed cannot lift any other document to the k-th of those, the result is theirs
        and the common terms' long posting lists are only searched, never summed over the whole corpus."""
        terms = self.term_ids(query)
        if len(terms) == 0 or k < 1:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        common = self.indptr[terms + 1] - self.indptr[terms] > max(COMMON_POSTINGS, self.num_docs // 64)
        if not common.all():
            ids = np.concatenate([self._postings(t)[0] for t in terms[~common]])
            ids.sort()
            ids = ids[np.r_[True, ids[1:] != ids[:-1]]]  # the union of sorted lists (np.unique hashes: slower)
            scores = self._term_scores(terms, ids)
            if not common.any() or self._out_of_reach(terms[common], scores, k):
                best, best_scores = top_k(scores, k)
                return ids[best].astype(np.int64), best_scores
        scores = np.zeros(self.num_docs, dtype=np.float32)
        for t in terms:
            docs, values = self._postings(t)
            scores[docs] += values
        return top_k(scores, k)

    def score(self, query: str, ids: np.ndarray) -> np.ndarray:
        """BM25 scores of the documents ``ids`` (sorted ascending, unique) for ``query``."""
        return self._term_scores(self.term_ids(query), np.asarray(ids))

    def _postings(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = int(self.indptr[t]), int(self.indptr[t + 1])
        return self.indices[lo:hi], self.data[lo:hi]

    def _term_scores(self, terms: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Scores of the sorted documents ``ids``: each posting list intersected with them, summed in term order
        (the float32 sums of a whole-corpus search, bit for bit)."""
        d = len(ids)
        scores = np.zeros(d, dtype=np.float32)
        table = None
        try:
            for t in terms:
                postings, values = self._postings(t)
                postings = postings.astype(ids.dtype, copy=False)  # searchsorted copies a haystack of another dtype
                p = len(postings)
                if d >= TABLE_MIN_IDS and d // 16 <= p <= 8 * d:  # both long: a table of positions, no search
                    if table is None:
                        table = self._position_table()
                        table[ids] = np.arange(d, dtype=np.int32)
                    at = table[postings]
                    hit = np.flatnonzero(at >= 0)
                    scores[at[hit]] += values[hit]
                elif 0 < p <= d:  # the shorter list is searched in the longer one
                    at = np.minimum(np.searchsorted(ids, postings), d - 1)
                    hit = ids[at] == postings
                    scores[at[hit]] += values[hit]
                elif p:
                    at = np.minimum(np.searchsorted(postings, ids), p - 1)
                    hit = postings[at] == ids
                    scores[hit] += values[at[hit]]
        finally:
            if table is not None:
                table[ids] = -1
        return scores

    def _position_table(self) -> np.ndarray:
        """A per-thread int32 array over all documents, -1 everywhere between calls."""
        table = getattr(self._tables, "positions", None)
        if table is None:
            table = self._tables.positions = np.full(self.num_docs, -1, dtype=np.int32)
        return table

    def _out_of_reach(self, common: np.ndarray, scores: np.ndarray, k: int) -> bool:
        """Whether a document outside the scored ones, holding at most the ``common`` terms, scores below the
        k-th best scored one (strictly: a tie could go to a smaller id)."""
        if len(scores) < k:
            return False
        kth = float(np.partition(scores, len(scores) - k)[len(scores) - k])
        bound = float(sum(float(self._max_score(t)) for t in common))
        return kth > 0 and bound * (1 + 1e-5) < kth  # float32 sums round: a small margin

    def _max_score(self, t: int) -> float:
        """The largest score in a term's posting list (computed once per term)."""
        if t not in self._max_scores:
            values = self._postings(t)[1]
            self._max_scores[t] = float(values.max()) if len(values) else 0.0
        return self._max_scores[t]


def _count_terms(docs, stopwords: str, stem, chunk_docs: int):
    """(document x term counts as a CSR matrix, terms per document, the terms) of ``docs`` tokenised as
    ``bm25s.tokenize`` does: lowercase, its token pattern, stop words out, then stemmed. Terms are numbered
    in order of first appearance; each distinct word is stemmed once."""
    split = re.compile(TOKEN_PATTERN).findall
    stop = set(_infer_stopwords(stopwords))
    word_term: dict[str, int] = {}  # word -> term id, -1 for a stop word
    term_id: dict[str, int] = {}
    chunks, lengths = [], []
    for start in range(0, len(docs), chunk_docs):
        words = [split(str(doc).lower()) for doc in docs[start:start + chunk_docs]]
        codes, uniques = pd.factorize(np.fromiter(chain.from_iterable(words), dtype=object,
                                                  count=sum(map(len, words))))
        new = [w for w in uniques if w not in word_term and w not in stop]
        for w in uniques:
            if w in stop:
                word_term[w] = -1
        for w, s in zip(new, stem.stemWords(new) if stem is not None else new):
            word_term[w] = term_id.setdefault(s, len(term_id))
        terms = np.fromiter((word_term[w] for w in uniques), dtype=np.int32, count=len(uniques))[codes]
        docs_of = np.repeat(np.arange(len(words), dtype=np.int32), [len(w) for w in words])
        keep = terms >= 0
        terms, docs_of = terms[keep], docs_of[keep]
        lengths.append(np.bincount(docs_of, minlength=len(words)))
        chunks.append(sp.csr_matrix((np.ones(len(terms), dtype=np.float32), (docs_of, terms)),
                                    shape=(len(words), len(term_id))))  # duplicates summed: term counts
    n_terms = len(term_id)
    for c in chunks:
        c.resize(c.shape[0], n_terms)
    counts = sp.vstack(chunks, format="csr") if chunks else sp.csr_matrix((0, 0), dtype=np.float32)
    doc_len = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    stems = [""] * n_terms
    for s, t in term_id.items():
        stems[t] = s
    return counts, doc_len, stems


def _bm25_scores(retriever: bm25s.BM25, counts: sp.csr_matrix, doc_len: np.ndarray) -> dict:
    """bm25s's score matrix (CSC over terms, each posting list by document id) from term counts, with its own
    idf and term-frequency functions evaluated with the same float64 arithmetic, then stored as float32."""
    r, n_docs = retriever, counts.shape[0]
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    idf_fn, tfc_fn = _select_idf_scorer(r.idf_method), _select_tfc_scorer(r.method)
    idf = np.array([idf_fn(int(d), N=n_docs) if d else 0.0 for d in df], dtype=r.dtype)
    avg_len = np.asarray(doc_len, dtype=np.int64).mean()
    r.nonoccurrence_array = None
    if r.method in r.methods_requiring_nonoccurrence:
        tfc0 = tfc_fn(tf_array=0, l_d=avg_len, l_avg=avg_len, k1=r.k1, b=r.b, delta=r.delta)
        r.nonoccurrence_array = np.array([idf_fn(int(d), N=n_docs) * tfc0 if d else 0.0 for d in df], dtype=r.dtype)
    data = np.empty(counts.nnz, dtype=r.dtype)
    step = 1 << 20  # entries at a time: the float64 temporaries stay small (~40 MB)
    for lo in range(0, counts.nnz, step):
        hi, terms = min(lo + step, counts.nnz), counts.indices[lo:lo + step]
        rows = np.searchsorted(counts.indptr, np.arange(lo, hi), side="right") - 1
        score = idf[terms] * tfc_fn(tf_array=counts.data[lo:hi], l_d=doc_len[rows].astype(np.float64),
                                    l_avg=avg_len, k1=r.k1, b=r.b, delta=r.delta)
        if r.nonoccurrence_array is not None:
            score -= r.nonoccurrence_array[terms]
        data[lo:hi] = score
    counts.data = data
    csc = counts.tocsc()  # per term, document ids ascending
    return {"data": csc.data, "indices": csc.indices.astype(r.int_dtype, copy=False),
            "indptr": csc.indptr.astype(np.int64, copy=False), "num_docs": n_docs}
