"""The held-out baselines of the SST-2 chapter (not claims of the paper): the least-squares floor,
bag-of-words logistic regression and a reference Transformer trained with Adam."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..data.sst2 import SST2Task, sst2_data
from ..model import ModelConfig, forward, forward_trace, init_params
from ..stats import estimate
from .base import spread

__all__ = ["correct", "pooled_baseline", "bow_logistic", "adam_reference", "heldout_baselines",
           "heldout_rows", "without_correct"]


def correct(pred: np.ndarray, labels: np.ndarray) -> str:
    """Per sentence, ``"1"`` where the prediction (a score, positive for label 1) is right."""
    return "".join("1" if ok else "0" for ok in ((np.asarray(pred) > 0) == (np.asarray(labels) == 1)))


def pooled_baseline(X: torch.Tensor, labels: np.ndarray, X_val: torch.Tensor, labels_val: np.ndarray) -> dict:
    """The floor baseline: least squares from the mean-pooled token vectors and an intercept to
    ``+-1``; training and validation accuracy, training MSE, ``val_correct`` (:func:`correct`)."""
    A = np.c_[X.double().mean(1).cpu().numpy(), np.ones(len(labels))]
    B = np.c_[X_val.double().mean(1).cpu().numpy(), np.ones(len(labels_val))]
    y = 2.0 * labels - 1.0
    w = np.linalg.lstsq(A, y, rcond=None)[0]
    return {"train_accuracy": float(((A @ w > 0) == labels).mean()),
            "val_accuracy": float(((B @ w > 0) == labels_val).mean()),
            "train_mse": float(np.mean((A @ w - y) ** 2)), "val_correct": correct(B @ w, labels_val)}


def _bow_index(tokens: list, vocab: list) -> torch.Tensor:
    """``(N, n)`` indices of the tokens in ``vocab``; a token outside it gets ``len(vocab)``."""
    index = {t: i for i, t in enumerate(vocab)}
    return torch.tensor([[index.get(t, len(vocab)) for t in sent] for sent in tokens], dtype=torch.long)


def _fit_logistic(idx: torch.Tensor, y: torch.Tensor, V: int, lam: float, iters: int) -> torch.Tensor:
    """Weights ``(V + 2,)`` (one per word, a zero for the unknown word, the intercept last) that
    minimise ``sum_i log(1 + exp(-y_i f_i)) + lam / 2 ||w_words||^2`` with ``f_i = b + sum_t w[idx_it]``
    (L-BFGS, float64)."""
    w = torch.zeros(V + 2, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=iters, tolerance_grad=1e-9, tolerance_change=1e-12,
                            history_size=20, line_search_fn="strong_wolfe")
    mask = torch.ones(V + 2, dtype=torch.float64)
    mask[V:] = 0.0                                    # the unknown word stays 0, the intercept is free

    def closure():
        opt.zero_grad()
        f = (w * mask)[idx].sum(1) + w[-1]
        loss = torch.nn.functional.softplus(-y * f).sum() + 0.5 * lam * (w * mask)[:V].pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach()   # the unknown word's weight gets no gradient: it stays 0


def _bow_scores(w: torch.Tensor, idx: torch.Tensor) -> np.ndarray:
    return (w[:-1][idx].sum(1) + w[-1]).numpy()


def bow_logistic(tokens: list, labels: np.ndarray, tokens_val: list, labels_val: np.ndarray, vocab: list, *,
                 lambdas, folds: int = 5, iters: int = 200) -> dict:
    """The bag-of-words baseline: L2-regularized logistic regression on word counts, ``lam`` chosen
    from ``lambdas`` by ``folds``-fold cross-validation on the training sentences, then refitted."""
    V = len(vocab)
    idx, idx_val = _bow_index(tokens, vocab), _bow_index(tokens_val, vocab)
    y = torch.tensor(2.0 * labels - 1.0, dtype=torch.float64)
    fold = np.arange(len(labels)) % folds
    cv = []
    for lam in lambdas:
        right = 0
        for k in range(folds):
            tr, te = torch.from_numpy(fold != k), torch.from_numpy(fold == k)
            w = _fit_logistic(idx[tr], y[tr], V, float(lam), iters)
            right += int(((_bow_scores(w, idx[te]) > 0) == (labels[fold == k] == 1)).sum())
        cv.append(right / len(labels))
    lam = float(lambdas[int(np.argmax(cv))])
    w = _fit_logistic(idx, y, V, lam, iters)
    f, fv = _bow_scores(w, idx), _bow_scores(w, idx_val)
    return {"train_accuracy": float(((f > 0) == (labels == 1)).mean()),
            "val_accuracy": float(((fv > 0) == (labels_val == 1)).mean()), "lambda": lam,
            "cv_accuracy": dict(zip([float(v) for v in lambdas], cv)),
            "val_correct": correct(fv, labels_val)}


def adam_reference(s: dict, task: SST2Task, seed: int, device=None) -> dict:
    """The reference Transformer (not a claim of the paper): the residual model of ``s["adam"]``,
    mean-pooled, logistic loss, full-batch Adam; early stopping on every ``holdout``-th training
    sentence (never on the validation split)."""
    a = s["adam"]
    cfg = ModelConfig(d=s["d"], d_qk=s["d_qk"], m=a["m"], c=1, L=a["L"], beta=1.0, pool="mean",
                      activation=s["activation"])
    dtype = task.X.dtype
    start = init_params(cfg, seed, dtype=dtype, device=device)
    p = {k: v.detach().requires_grad_(True) for k, v in start.items()}
    dev = p["W_U"].device
    inner = np.arange(len(task.labels)) % a["holdout"] == 0
    X, y = task.X[~inner].to(dev), task.Y[~inner].to(dev)
    Xi, yi = task.X[inner].to(dev), task.Y[inner].to(dev)
    opt = torch.optim.Adam(list(p.values()), lr=a["lr"])
    best = (-1.0, 0, {k: v.detach().clone() for k, v in p.items()})
    for t in range(a["steps"] + 1):
        if t % a["every"] == 0:
            with torch.no_grad():
                acc = float((torch.sign(forward_trace(p, Xi, cfg).F) == yi).double().mean())
            if acc > best[0]:
                best = (acc, t, {k: v.detach().clone() for k, v in p.items()})
        if t == a["steps"]:
            break
        opt.zero_grad()
        loss = torch.nn.functional.softplus(-y * forward_trace(p, X, cfg).F).mean()
        loss.backward()
        opt.step()
    with torch.no_grad():
        fv = forward(best[2], task.X_val.to(dev), cfg)[:, 0].double().cpu().numpy()
        f = forward(best[2], X, cfg)[:, 0].double().cpu().numpy()
    return {"seed": seed, "step": best[1], "inner_accuracy": best[0],
            "train_accuracy": float(((f > 0) == (y[:, 0].cpu().numpy() > 0)).mean()),
            "val_accuracy": float(((fv > 0) == (task.labels_val == 1)).mean()),
            "val_correct": correct(fv, task.labels_val)}


def heldout_baselines(s: dict, task: SST2Task, data_dir, dtype, adam: Callable[[], list]) -> dict:
    """The held-out baselines of the settings ``s``: the floor (and at twice the dimension), the bag of
    words, ``adam()`` (the reference Transformers, when ``s["adam"]``), the majority class."""
    twice = sst2_data({**s, "d": 2 * s["d"]}, data_dir, dtype)
    bow = s.get("bow")
    return {
        "floor": pooled_baseline(task.X, task.labels, task.X_val, task.labels_val),
        "floor_2d": pooled_baseline(twice.X, twice.labels, twice.X_val, twice.labels_val),
        "bow": bow_logistic(task.tokens, task.labels, task.tokens_val, task.labels_val, task.vocab,
                            lambdas=bow["lambdas"], folds=bow["folds"], iters=bow["iters"]) if bow else None,
        "adam": adam() if s.get("adam") else None,
        "majority_val_accuracy": float(max(task.labels_val.mean(), 1 - task.labels_val.mean()))}


def without_correct(v):
    """The baselines' records without their per-sentence ``val_correct`` (a summary keeps the numbers)."""
    if isinstance(v, dict):
        return {k: without_correct(x) for k, x in v.items() if k != "val_correct"}
    return [without_correct(x) for x in v] if isinstance(v, list) else v


def heldout_rows(data: dict, kinds) -> list[dict]:
    """Held-out accuracy on the validation split (not a claim of the paper): per arm and baseline,
    the accuracy's spread over seeds and its difference from the floor and bag-of-words baselines
    over the sentences, with a 95% interval (:func:`convres.stats.estimate`); the arms by depth, then
    in the order of ``kinds``."""
    b = data["baselines"]
    ref = {"floor": b["floor"]["val_correct"], **({"bow": b["bow"]["val_correct"]} if b.get("bow") else {})}
    rows: list[dict] = []

    def add(name, kind, L, corrects):
        hits = np.array([[c == "1" for c in v] for v in corrects], dtype=np.float64)
        acc = hits.mean(axis=1)
        row = {"name": name, "kind": kind, "L": L, "accuracy": spread(acc.tolist())}
        for key, r in ref.items():
            d = hits.mean(axis=0) - np.array([c == "1" for c in r], dtype=np.float64)
            est = estimate(d.tolist(), min_units=2, draws=2000)
            row[f"vs_{key}"] = {"effect": est.effect, "ci": [est.lo, est.hi]}
        row["beats_floor"] = row["vs_floor"]["ci"][0] > 0
        rows.append(row)

    by: dict = {}
    for r in data["runs"]:
        if r["protocol"] == "tuned" and r["status"] != "diverged":
            by.setdefault((r["L"], r["arm"]), []).append(r["val_correct"])
    for (L, kind), v in sorted(by.items(), key=lambda kv: (kv[0][0], kinds.index(kv[0][1]))):
        add(f"L={L}, {kind}", "arm", L, v)
    add("floor (least squares, mean vector)", "baseline", None, [b["floor"]["val_correct"]])
    add("floor with twice the dimension", "baseline", None, [b["floor_2d"]["val_correct"]])
    if b.get("bow"):
        add("bag of words, logistic regression", "baseline", None, [b["bow"]["val_correct"]])
    if b.get("adam"):
        add("reference Transformer (Adam)", "baseline", None, [r["val_correct"] for r in b["adam"]])
    return rows
