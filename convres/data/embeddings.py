"""Frozen word vectors for the SST-2 chapter: PPMI-SVD vectors of the unlabelled training text."""

import collections

import numpy as np
import torch

from ..values import as_int, as_real


def ppmi_embeddings(sentences, d: int, *, vocab_size: int = 5000, smoothing: float = 0.75,
                    seed: int = 0, iterations: int = 4):
    """``(vocab, vectors)``: ``U_d S_d^(1/2)`` of ``PPMI[w, c] = max(0, log(P(w, c) / (P(w) P_s(c))))``
    over the ``vocab_size`` most frequent tokens, pairs within a sentence, ``P_s`` the context
    distribution to the power ``smoothing`` (Levy, Goldberg and Dagan 2015), by subspace iteration."""
    d = as_int("d (the embedding dimension)", d, minimum=1)
    vocab_size = as_int("vocab_size", vocab_size, minimum=2)
    as_real("smoothing", smoothing, minimum=0, above=True, maximum=1)
    iterations = as_int("iterations", iterations, minimum=1)
    sentences = [list(s) for s in sentences]
    if not sentences or not all(sentences):
        raise ValueError("sentences must be a non-empty list of non-empty token lists.")
    counts = collections.Counter(t for s in sentences for t in s)
    vocab = sorted(counts, key=lambda t: (-counts[t], t))[:vocab_size]
    V = len(vocab)
    if d > V:
        raise ValueError(f"d = {d} exceeds the vocabulary ({V} distinct tokens); use d <= {V}.")
    index = {t: i for i, t in enumerate(vocab)}
    width = max(len(s) for s in sentences)
    ids = np.full((len(sentences), width), -1, dtype=np.int64)
    for k, s in enumerate(sentences):
        ids[k, :len(s)] = [index.get(t, -1) for t in s]
    codes = []
    for lag in range(1, width):      # every pair of positions (i, i + lag), both orders
        a, b = ids[:, :-lag].ravel(), ids[:, lag:].ravel()
        ok = (a >= 0) & (b >= 0)
        codes += [a[ok] * V + b[ok], b[ok] * V + a[ok]]
    C = np.bincount(np.concatenate(codes), minlength=V * V).reshape(V, V).astype(np.float64)
    del codes
    total = C.sum()
    if total == 0:
        raise ValueError("no two vocabulary tokens share a sentence: the text is too short.")
    p_w = C.sum(1) / total
    p_c = C.sum(0) ** smoothing
    p_c = p_c / p_c.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        pmi = np.log(C / total) - np.log(p_w)[:, None] - np.log(p_c)[None, :]
    M = np.where(np.isfinite(pmi) & (pmi > 0), pmi, 0.0)
    rng = np.random.default_rng(int(seed))
    k = min(V, d + 16)
    Q = np.linalg.qr(M @ rng.standard_normal((V, k)))[0]
    for _ in range(iterations):
        Q = np.linalg.qr(M @ (M.T @ Q))[0]
    U, S, _ = np.linalg.svd(Q.T @ M, full_matrices=False)
    vectors = (Q @ U[:, :d]) * np.sqrt(S[:d])
    flip = np.sign(vectors[np.abs(vectors).argmax(0), np.arange(d)])
    return vocab, vectors * flip


def embed_with(sentences, vocab, vectors, *, mean=None, std=None, dtype=torch.float64):
    """``(X, (mean, std), oov)``: ``X`` ``(N, n, d)`` of equal-length token lists, standardized by
    ``mean`` and ``std`` (default: the known tokens'), an unknown token at the mean."""
    lengths = {len(s) for s in sentences}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError("sentences must be a non-empty list of non-empty token lists of one length.")
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(vocab):
        raise ValueError(f"vectors must be a (len(vocab), d) array, got shape {vectors.shape} for "
                         f"{len(vocab)} tokens.")
    index = {t: i for i, t in enumerate(vocab)}
    ids = np.array([[index.get(t, -1) for t in s] for s in sentences], dtype=np.int64)
    known = ids >= 0
    if mean is None or std is None:
        if not known.any():
            raise ValueError("no token of sentences is in the vocabulary: cannot standardize.")
        seen = vectors[ids[known]]
        mean, std = seen.mean(0), seen.std(0)
    mean, std = np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)
    if not (np.isfinite(std).all() and (std > 0).all()):
        raise ValueError("every embedding coordinate needs a finite, positive standard deviation.")
    table = np.vstack([(vectors - mean) / std, np.zeros((1, vectors.shape[1]))])
    X = table[np.where(known, ids, len(vocab))]
    return torch.tensor(X, dtype=dtype), (mean, std), float(1.0 - known.mean())
