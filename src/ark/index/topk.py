import numpy as np


def top_k(scores: np.ndarray, k: int, positive_only: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the k largest scores (only positive ones unless ``positive_only`` is False), best first, ties broken
    by the smaller index: ``np.lexsort((indices, -scores))[:k]`` without sorting them all.

    Selects on the negated scores: ``argpartition(-scores, k)`` stays fast when most scores are 0.
    """
    k = min(k, int(np.count_nonzero(scores > 0)) if positive_only else len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=scores.dtype)
    part = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    # widen to every index tied with the k-th score so tie-breaking by index is exact
    kth = scores[part].min()
    cand = np.flatnonzero(scores >= kth) if np.count_nonzero(scores == kth) > 1 else part
    order = np.lexsort((cand, -scores[cand]))[:k]
    ids = cand[order]
    return ids.astype(np.int64), scores[ids]
