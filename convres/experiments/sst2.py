"""SST-2: depth L = 2, 6, 10 with and without residual connections (protocol v4, claims T1-T4).

Book chapter *SST-2* (``book/sst2.md``): GLUE sentences cut to ``n_tokens`` tokens, frozen PPMI-SVD
vectors, the target +-1 at every token. Arms per depth, from the same Gaussian draws of a seed:
``residual`` (``beta = 1``), ``isometric`` (:func:`isometric_init`, not collapsed),
``norm-preserving`` (:func:`norm_preserving_init`, collapsed at depth), and a ``matched`` shallow
residual arm (:func:`matched_width`). Held-out accuracy against baselines is not a claim of the paper.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from ..data import embed_with, fingerprint, load_sst2, ppmi_embeddings, sst2_prefixes
from ..gd import gradient_descent, loss_and_grad, sweep
from ..lemmas import hessian_norm, parameter_count
from ..model import (
    ModelConfig,
    attention_scale,
    block,
    forward,
    forward_trace,
    init_params,
    layer_params,
)
from ..plotting import plot_sst2
from ..runtime import check_device, torch_threads
from ..stats import ProbeRun, estimate, log_ratio, mean_log_loss, steps_to, tune_step
from ..theory import ffn_theorem_run
from ..values import json_safe
from .base import (
    RUN_CONTEXT,
    CheckResult,
    Experiment,
    Result,
    Shape,
    claim_record,
    design_check,
    dtype_of,
    finite_list,
    level_steps,
    output_rows,
    positive_int,
    probe_count,
    protocol_summary,
    rerun_diverged,
    shared_by_pieces,
    spread,
    spread_row,
    stable,
    step_table,
)

__all__ = ["EXPERIMENT", "SST2Task", "Arm", "ARM_KINDS", "sst2_data", "pooled_baseline", "bow_logistic",
           "adam_reference", "SST2_PROBE_WORDS", "token_targets", "norm_preserving_init", "isometric_init",
           "matched_width", "arms_of", "arm_config", "arm_params", "init_diagnostics",
           "design_checks", "claim_records", "heldout_table", "rerun", "prepare"]

#: Words whose nearest neighbours the SST-2 chapter shows (a look at what the embeddings carry).
SST2_PROBE_WORDS = ("good", "bad", "funny", "boring")
#: The arms: ``residual`` (beta = 1), ``isometric`` and ``norm-preserving`` (beta = 0, two inits),
#: ``matched`` (beta = 1 at the shallowest depth, FFN widened to the deepest stack's parameter count).
ARM_KINDS = ("residual", "isometric", "norm-preserving", "matched")
#: The arms that run at the common step too (the secondary protocol of the claims' sensitivity).
COMMON_KINDS = ("residual", "isometric", "matched")


class Arm(NamedTuple):
    """One arm: depth ``L`` and ``kind`` (one of :data:`ARM_KINDS`)."""

    L: int
    kind: str

    @property
    def name(self) -> str:
        return f"L={self.L}, {self.kind}"

    @property
    def residual(self) -> bool:
        return self.kind in ("residual", "matched")


class SST2Task(NamedTuple):
    """The SST-2 task: ``X`` ``(N, n, d)``, ``Y`` ``(N, 1)`` (+-1), ``labels`` (0/1), the same for the
    GLUE validation split, the token lists, the vocabulary and ``info`` (sizes, out-of-vocabulary
    shares, nearest neighbours)."""

    X: torch.Tensor
    Y: torch.Tensor
    labels: np.ndarray
    X_val: torch.Tensor
    Y_val: torch.Tensor
    labels_val: np.ndarray
    tokens: list
    tokens_val: list
    vocab: list
    info: dict


def _neighbours(vocab, vectors, words, k: int = 5) -> dict:
    index = {t: i for i, t in enumerate(vocab)}
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-300)
    out = {}
    for w in words:
        if w in index:
            sim = unit @ unit[index[w]]
            out[w] = [vocab[j] for j in np.argsort(-sim, kind="stable") if j != index[w]][:k]
    return out


def sst2_data(s: dict, data_dir=None, dtype=torch.float32) -> SST2Task:
    """The book's SST-2 task: ``n_train / 2`` sentences of each label (file order) and the validation
    split, cut to ``n_tokens`` tokens (:func:`convres.data.sst2_prefixes`); PPMI-SVD vectors of the
    training text (:func:`convres.data.ppmi_embeddings`), standardized over the training tokens."""
    n_tokens, n_train = positive_int(s, "n_tokens"), positive_int(s, "n_train")
    train, val = load_sst2("train", data_dir=data_dir), load_sst2("validation", data_dir=data_dir)
    tokens, labels, _ = sst2_prefixes(train, n_tokens, n_train)
    tokens_val, labels_val, _ = sst2_prefixes(val, n_tokens, s.get("n_val"))
    if s.get("embedding", "ppmi") != "ppmi":
        raise ValueError(f"setting 'embedding' must be 'ppmi', got {s.get('embedding')!r}.")
    vocab, vectors = ppmi_embeddings(train["sentence"].str.split().tolist(), s["d"],
                                     vocab_size=s["vocab_size"], seed=s["emb_seed"])
    X, (mean, std), oov = embed_with(tokens, vocab, vectors, dtype=dtype)
    Xv, _, oov_val = embed_with(tokens_val, vocab, vectors, mean=mean, std=std, dtype=dtype)
    target = lambda y: torch.tensor(2.0 * y - 1.0, dtype=dtype)[:, None]  # noqa: E731
    info = {"vocab_size": len(vocab), "oov_train": oov, "oov_val": oov_val,
            "neighbours": _neighbours(vocab, vectors, SST2_PROBE_WORDS),
            "examples": [{"label": int(y), "tokens": t} for t, y in zip(tokens[:4], labels[:4])],
            "train_sentences": int(len(train)), "val_sentences": int(len(val))}
    return SST2Task(X, target(labels), labels, Xv, target(labels_val), labels_val, tokens, tokens_val,
                    list(vocab), info)


def _correct(pred: np.ndarray, labels: np.ndarray) -> str:
    """Per sentence, ``"1"`` where the prediction (a score, positive for label 1) is right."""
    return "".join("1" if ok else "0" for ok in ((np.asarray(pred) > 0) == (np.asarray(labels) == 1)))


def pooled_baseline(X: torch.Tensor, labels: np.ndarray, X_val: torch.Tensor, labels_val: np.ndarray) -> dict:
    """The floor baseline: least squares from the mean-pooled token vectors and an intercept to
    ``+-1``; training and validation accuracy, training MSE, ``val_correct`` (``_correct``)."""
    A = np.c_[X.double().mean(1).cpu().numpy(), np.ones(len(labels))]
    B = np.c_[X_val.double().mean(1).cpu().numpy(), np.ones(len(labels_val))]
    y = 2.0 * labels - 1.0
    w = np.linalg.lstsq(A, y, rcond=None)[0]
    return {"train_accuracy": float(((A @ w > 0) == labels).mean()),
            "val_accuracy": float(((B @ w > 0) == labels_val).mean()),
            "train_mse": float(np.mean((A @ w - y) ** 2)), "val_correct": _correct(B @ w, labels_val)}


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
    out = w.detach().clone()
    out[V] = 0.0
    return out


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
            "val_correct": _correct(fv, labels_val)}


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
            "val_correct": _correct(fv, task.labels_val)}


def token_targets(Y: torch.Tensor, n: int) -> torch.Tensor:
    """The per-token targets ``(N, n, 1)``: the sentence's target ``+-1`` at each of its ``n``
    tokens. The loss (5) over these rows is ``n`` times the pooled loss of the mean output plus the
    spread of the outputs within each sentence: ``sum_t (F_t - y)^2 = n (Fbar - y)^2 +
    sum_t (F_t - Fbar)^2``."""
    return Y[:, None, :].expand(-1, n, -1).contiguous()


def _rms(t: torch.Tensor) -> float:
    return float(t.double().pow(2).mean().sqrt())


def _gain(p: dict, key: str, factor: float) -> None:
    p[key] = p[key] * factor


def _block_by_block(cfg: ModelConfig, X: torch.Tensor, seed: int, dtype, name: str, adjust) -> dict:
    """The draws of :func:`convres.model.init_params` (branch scale 1) of a stack without residuals,
    then for ``l = 1, ..., L`` on ``X``: ``adjust(p, l, H_{l-1}, out)``, ``out()`` the outputs
    ``(logits, S, A, Z, M, H)`` of block ``l`` with the weights as they are then."""
    if cfg.residual != (0.0, 0.0):
        raise ValueError(f"{name} is an init of the model without residual connections; got residual "
                         f"coefficients {cfg.residual}.")
    p = init_params(cfg, seed, dtype=dtype, branch_scale=1.0)
    H = X.to(dtype=dtype, device=p["W_U"].device)
    with torch.no_grad():
        for l in range(1, cfg.L + 1):
            def out(l: int = l, H: torch.Tensor = H) -> tuple:
                return block(H, layer_params(p, l), s=attention_scale(cfg), act=cfg.act, beta_attn=0.0,
                             beta_ffn=0.0)
            adjust(p, l, H, out)
            H = out()[5]
    return p


def norm_preserving_init(cfg: ModelConfig, X: torch.Tensor, seed: int = 0, *,
                         dtype=torch.float64) -> dict[str, torch.Tensor]:
    """LSUV (Mishkin and Matas 2016) for a stack without residuals (:func:`_block_by_block`):

        W_V^(l) <- W_V^(l) RMS(H_{l-1}) / RMS(A_l),    W_2^(l) <- W_2^(l) RMS(H_{l-1}) / RMS(H_l)
    """
    def adjust(p, l, H, out):
        for name, k in (("W_V", 2), ("W_2", 5)):
            _gain(p, f"layer{l}.{name}", _rms(H) / _rms(out()[k]))
    return _block_by_block(cfg, X, seed, dtype, "norm_preserving_init", adjust)


def _polar(W: torch.Tensor) -> torch.Tensor:
    """The orthogonal factor ``U V^T`` of ``W = U Sigma V^T``."""
    U, _, Vh = torch.linalg.svd(W, full_matrices=False)
    return U @ Vh


def isometric_init(cfg: ModelConfig, X: torch.Tensor, seed: int = 0, *, identity_gain: float,
                   preactivation: float, dtype=torch.float64) -> dict[str, torch.Tensor]:
    """A stack without residuals started near an isometry (not collapsed); from the draws ``G``, per
    block (:func:`_block_by_block`):

        W_Q = G_Q + c I,  W_K = G_K + c I       (attention near the identity)
        W_V = a_V P(G_V),  W_1 = a_1 P(G_1),  W_2 = a_2 P(G_2)

    ``c = identity_gain``, ``P`` the orthogonal factor, ``RMS(A_l) = sqrt(eps) RMS(H_{l-1})``,
    ``RMS(Z_l W_1) = eps = preactivation`` (GELU near-linear), ``RMS(H_l) = RMS(H_{l-1})``.
    """
    def adjust(p, l, H, out):
        key = lambda w: f"layer{l}.{w}"  # noqa: E731
        for w in ("W_Q", "W_K"):
            p[key(w)] = p[key(w)] + identity_gain * torch.eye(cfg.d, cfg.d_qk, dtype=dtype, device=H.device)
        for w in ("W_V", "W_1", "W_2"):
            p[key(w)] = _polar(p[key(w)])
        _gain(p, key("W_V"), math.sqrt(preactivation) * _rms(H) / _rms(out()[2]))
        _gain(p, key("W_1"), preactivation / _rms(out()[3] @ p[key("W_1")]))
        _gain(p, key("W_2"), _rms(H) / _rms(out()[5]))
    return _block_by_block(cfg, X, seed, dtype, "isometric_init", adjust)


def matched_width(s: dict) -> int:
    """The FFN width ``m`` of the shallowest residual stack whose parameter count is closest to the
    deepest stack's (width ``s["m"]``), by :func:`convres.lemmas.parameter_count` ``L (2 d d_qk + d^2
    + 2 d m) + d`` (protocol check (c))."""
    lo, hi = min(s["depths"]), max(s["depths"])
    target, d = parameter_count(_cfg(s, hi, 1.0)), s["d"]
    m = (target - parameter_count(_cfg(s, lo, 1.0, m=1)) + 2 * d * lo) / (2 * d * lo)
    return min({max(1, math.floor(m)), max(1, math.ceil(m))},
               key=lambda w: (abs(parameter_count(_cfg(s, lo, 1.0, m=w)) - target), w))


def _cfg(s: dict, L: int, beta: float, **changes) -> ModelConfig:
    return ModelConfig(**{**dict(d=s["d"], d_qk=s["d_qk"], m=s["m"], c=1, L=L, beta=beta, pool=None,
                                 activation=s["activation"]), **changes})


def arms_of(s: dict) -> list[Arm]:
    """Every arm of the settings ``s``: per depth the kinds of ``s["arms"]``, then the ``matched``
    arm at the shallowest depth (when ``s["matched"]``)."""
    out = [Arm(L, k) for L in s["depths"] for k in s["arms"]]
    bad = [k for k in s["arms"] if k not in ARM_KINDS[:3]]
    if bad or not s["arms"]:
        raise ValueError(f"setting 'arms' must be a non-empty list of {list(ARM_KINDS[:3])}, "
                         f"got {s['arms']!r}.")
    return out + ([Arm(min(s["depths"]), "matched")] if s.get("matched") else [])


def arm_config(s: dict, arm: Arm) -> ModelConfig:
    """The model of ``arm``: ``beta = 1`` for the residual arms, 0 otherwise; the matched arm's FFN
    width from :func:`matched_width`."""
    if arm.kind not in ARM_KINDS:
        raise ValueError(f"unknown arm kind {arm.kind!r}; choose one of {ARM_KINDS}.")
    return _cfg(s, arm.L, 1.0 if arm.residual else 0.0,
                **({"m": matched_width(s)} if arm.kind == "matched" else {}))


def arm_params(s: dict, arm: Arm, seed: int, X: torch.Tensor, *,
               dtype=torch.float64) -> dict[str, torch.Tensor]:
    """The initial weights of ``arm`` for ``seed``, from the seed's Gaussian draws for every arm:
    :func:`convres.model.init_params`, :func:`isometric_init` or :func:`norm_preserving_init` (on ``X``)."""
    cfg = arm_config(s, arm)
    if arm.residual:
        return init_params(cfg, seed, dtype=dtype)
    if arm.kind == "isometric":
        return isometric_init(cfg, X, seed, identity_gain=s["identity_gain"],
                              preactivation=s["preactivation"], dtype=dtype)
    return norm_preserving_init(cfg, X, seed, dtype=dtype)


def _pooled_sigma(H: torch.Tensor) -> tuple[float, float]:
    """``(sigma_min, sigma_min / sigma_max)`` of the pooled features: the ``N x d`` matrix of the
    sentences' mean rows of the last ``H``."""
    sv = torch.linalg.svdvals(H.double().mean(-2))
    return float(sv[-1]), float(sv[-1] / sv[0])


def _within(H: torch.Tensor) -> float:
    """The share of ``H`` that varies within a sentence: ``RMS(H - mean_t H) / RMS(H)``."""
    return _rms(H - H.mean(-2, keepdim=True)) / _rms(H)


_INIT_FIELDS = ("std", "rms_H", "grad_norm", "within_sentence", "pooled_sigma_ratio", "mse")


def init_diagnostics(s: dict, X: torch.Tensor, Yt: torch.Tensor, seeds) -> list[dict]:
    """Every arm at initialization (float64), per arm and seed: std of ``F``, RMS of the last ``H``,
    ``||grad Phi|| / (N n)``, within-sentence share, pooled ``sigma_min / sigma_max``, MSE."""
    X, Yt = X.double(), Yt.double()
    rows = []
    for arm in arms_of(s):
        cfg = arm_config(s, arm)
        for seed in seeds:
            phi, g, tr = loss_and_grad(arm_params(s, arm, seed, X), X, Yt, cfg)
            H, R = tr.H[-1], output_rows(cfg, X)
            grad = math.sqrt(sum(float(v.pow(2).sum()) for v in g.values())) / R
            vals = [float(tr.F.std()), _rms(H), grad, _within(H), _pooled_sigma(H)[1], 2 * float(phi) / R]
            rows.append({"L": arm.L, "arm": arm.kind, "seed": seed, **dict(zip(_INIT_FIELDS, vals))})
    return rows


def _init_table(s: dict, records: list[dict]) -> list[dict]:
    """The records of :func:`init_diagnostics` as one row per arm (median over the seeds), with its
    parameter count and the ratios to the residual arm of its depth (``std_ratio``, ``sigma_ratio``)."""
    by: dict = {}
    for r in records:
        by.setdefault((r["L"], r["arm"]), []).append(r)
    med = {k: {f: float(np.median([r[f] for r in rs])) for f in _INIT_FIELDS} for k, rs in by.items()}
    out = []
    for (L, kind), m in med.items():
        ref = med.get((L, "residual"))
        out.append({"L": L, "arm": kind, "residual": kind in ("residual", "matched"),
                    "params": parameter_count(arm_config(s, Arm(L, kind))), **m,
                    "std_ratio": m["std"] / ref["std"] if ref else None,
                    "sigma_ratio": m["pooled_sigma_ratio"] / ref["pooled_sigma_ratio"] if ref else None})
    return out


def design_checks(s: dict, table: list[dict]) -> list:
    """Protocol section 3 for SST-2 on :func:`_init_table`: (a) every arm alive, (b) the isometric
    arm not collapsed, (c) the matched arm's parameter count within 5% of the deepest stack's."""
    alive = max(abs(math.log10(r["std_ratio"])) for r in table if r["std_ratio"] is not None)
    iso = [r for r in table if r["arm"] == "isometric"]
    checks = [design_check("sst2 arms alive", alive)]
    if iso:
        checks += [design_check("sst2 within-sentence share", min(r["within_sentence"] for r in iso)),
                   design_check("sst2 pooled sigma ratio", min(r["sigma_ratio"] for r in iso))]
    if s.get("matched"):
        deep = parameter_count(_cfg(s, max(s["depths"]), 1.0))
        matched = parameter_count(arm_config(s, Arm(min(s["depths"]), "matched")))
        checks.append(design_check("sst2 matched shallow arm", abs(matched / deep - 1)))
    return checks


def _sweep(s: dict, X, Yt, plan: list, steps: int, dtype, device=None) -> tuple[int, list]:
    """``(R, runs)``: gradient descent of ``plan`` = ``[(arm, seed, eta)]`` in one sweep, every arm from
    its seed's weights (:func:`arm_params`), ``mu = eta / R`` (``R = N n`` rows)."""
    cfgs = [arm_config(s, a) for a, _, _ in plan]
    R = output_rows(cfgs[0], X)
    starts = [arm_params(s, a, seed, X, dtype=dtype) for a, seed, _ in plan]
    return R, sweep(starts, X, Yt, cfgs, [eta / R for _, _, eta in plan], steps, device=device)


def _tune(s: dict, X, Yt, arm: Arm, dtype, device) -> dict:
    """The arm's step ``eta`` by :func:`convres.stats.tune_step` on ``eta_grid``, each probe seed's
    score its final training MSE ``2 Phi_T / R`` (never censored); unstable: diverged or above its start."""
    def probe(etas: list[float], T: int) -> list[list]:
        R, out = _sweep(s, X, Yt, [(arm, k, e) for e in etas for k in s["probe_seeds"]], T, dtype, device)
        runs = [ProbeRun(2 * float(h.loss[-1]) / R, True) if stable(h) else None for _, h in out]
        k = len(s["probe_seeds"])
        return [runs[i * k:(i + 1) * k] for i in range(len(etas))]

    t = tune_step(probe, s["eta_grid"], horizon=positive_int(s, "probe_steps"),
                  max_horizon=4 * positive_int(s, "steps"), extend=s.get("extend", 8))
    return {"arm": arm.name, "L": arm.L, "kind": arm.kind, **json_safe(t)}


def _run_record(s, task, arm: Arm, seed: int, eta: float, protocol: str, p, h, level: float, R: int) -> dict:
    """One evaluation run: its MSE curve, the claims' measures and, from its last weights, training
    error, within-sentence share, pooled ``sigma`` ratio and the validation sentences right."""
    cfg, T = arm_config(s, arm), s["steps"]
    mse = h.loss * 2 / R
    every = positive_int(s, "record_every")
    diverged = h.status == "diverged"
    with torch.no_grad():
        tr = forward_trace(p, task.X.to(p["W_U"].device), cfg)
        Fv = forward_trace(p, task.X_val.to(p["W_U"].device), cfg).F.mean(-2)[:, 0]
    F = tr.F.mean(-2)[:, 0]
    return {"L": arm.L, "arm": arm.kind, "seed": seed, "protocol": protocol, "eta": eta, "status": h.status,
            "mse": finite_list([mse[t] for t in range(0, len(mse), every)]
                               + ([mse[-1]] if (len(mse) - 1) % every else [])),
            "final_mse": None if diverged else float(mse[-1]),
            "mean_log_loss": None if diverged else mean_log_loss(list(h.loss), T),
            "steps_to_level": steps_to(list(mse), level, relative=False),
            "train_error": float((torch.sign(F) != task.Y[:, 0].to(F)).double().mean()),
            "within_sentence": _within(tr.H[-1]), "pooled_sigma_ratio": _pooled_sigma(tr.H[-1])[1],
            "val_correct": _correct(Fv.double().cpu().numpy(), task.labels_val)}


def _evaluate(s, task, Yt, plan: list, protocol: str, level: float, dtype, device) -> list[dict]:
    """The records of the evaluation runs ``plan`` = ``[(arm, seed, eta)]`` (:func:`_sweep`)."""
    if not plan:
        return []
    R, out = _sweep(s, task.X, Yt, plan, s["steps"], dtype, device)
    return [_run_record(s, task, a, seed, eta, protocol, p, h, level, R)
            for (a, seed, eta), (p, h) in zip(plan, out)]


def _baselines(s: dict, task: SST2Task, data_dir, dtype, shared: dict) -> dict:
    """The held-out baselines: the floor (and at twice the dimension), the bag of words, the Adam
    reference Transformer (a shared part: its seeds are not evaluation seeds), the majority class."""
    twice = sst2_data({**s, "d": 2 * s["d"]}, data_dir, dtype)
    bow = s.get("bow")
    return {
        "floor": pooled_baseline(task.X, task.labels, task.X_val, task.labels_val),
        "floor_2d": pooled_baseline(twice.X, twice.labels, twice.X_val, twice.labels_val),
        "bow": bow_logistic(task.tokens, task.labels, task.tokens_val, task.labels_val, task.vocab,
                            lambdas=bow["lambdas"], folds=bow["folds"], iters=bow["iters"]) if bow else None,
        "adam": shared["adam"]() if s.get("adam") else None,
        "majority_val_accuracy": float(max(task.labels_val.mean(), 1 - task.labels_val.mean()))}


def _shared_parts(s: dict, task: SST2Task, Yt: torch.Tensor, dtype, device) -> dict:
    """The parts of a run that use no evaluation seed, name -> a function that returns the part,
    cached for every piece (:func:`convres.experiments.base.shared_by_pieces`)."""
    X = task.X

    def tune(a: Arm) -> Callable[[], Any]:
        return lambda: shared_by_pieces("tune-sst2", s, device, lambda: _tune(s, X, Yt, a, dtype, device),
                                        arm=list(a))

    parts: dict[str, Callable[[], Any]] = {f"tune {a.name}": tune(a) for a in arms_of(s)}
    parts["checks"] = lambda: shared_by_pieces("checks-sst2", s, device,
                                               lambda: init_diagnostics(s, X, Yt, s["pilot_seeds"]))
    parts["adam"] = lambda: shared_by_pieces(
        "adam-sst2", s, device, lambda: [adam_reference(s, task, k, device) for k in s["adam"]["seeds"]])

    def precision():
        chosen = {a: parts[f"tune {a.name}"]()["chosen"] for a in arms_of(s)}   # the same in every piece
        return shared_by_pieces("precision-sst2", s, device,
                                lambda: _precision_check(s, X, Yt, chosen, device))

    parts["precision"] = precision
    parts["wide"] = lambda: shared_by_pieces("wide-sst2", s, device, lambda: _run_sst2_wide(s, task, device))
    return parts


def prepare(profile: str, part: str, *, data_dir=None, device=None) -> dict | list | None:
    """Compute (or read back) one shared part of ``profile``'s run (:func:`_shared_parts`, e.g.
    ``"tune L=10, isometric"``) before its pieces, which read it from the cache."""
    if profile not in EXPERIMENT.profiles:
        raise ValueError(f"profile must be one of {sorted(EXPERIMENT.profiles)}, got {profile!r}.")
    s = dict(EXPERIMENT.profiles[profile])
    dtype = dtype_of(s)
    task = sst2_data(s, data_dir, dtype)
    parts = _shared_parts(s, task, token_targets(task.Y, task.X.shape[1]), dtype, check_device(device))
    if part not in parts:
        raise ValueError(f"unknown shared part {part!r}; choose one of {sorted(parts)}.")
    token = RUN_CONTEXT.set({"data": fingerprint(data_dir), "shared": []})  # the run's cache keys
    try:
        with torch_threads(1):
            return parts[part]()
    finally:
        RUN_CONTEXT.reset(token)


def _run_sst2(s: dict, *, progress=False, data_dir=None, device=None) -> dict:
    dtype = dtype_of(s)
    task = sst2_data(s, data_dir, dtype)
    X, Xv = task.X, task.X_val
    N, n = X.shape[:2]
    Yt = token_targets(task.Y, n)
    arms = arms_of(s)
    shared = _shared_parts(s, task, Yt, dtype, device)
    # 1. baselines on the same sentences; the floor's training MSE is the level of T4's alternative
    baselines = _baselines(s, task, data_dir, dtype, shared)
    level = baselines["floor"]["train_mse"]
    # 2. the design checks at initialization, on the pilot seeds, before any run (the same in every
    # piece); the evaluation seeds' starts are recorded too
    pilot = shared["checks"]()
    checks = design_checks(s, _init_table(s, pilot))
    init_rows = init_diagnostics(s, X, Yt, s["seeds"])
    # 3. each arm's step on the probe seeds (one cache entry an arm: shared by the pieces)
    tuned = {a: shared[f"tune {a.name}"]() for a in arms}
    eta = {a: t["chosen"] for a, t in tuned.items()}
    if any(v is None for v in eta.values()):
        none = [a.name for a, v in eta.items() if v is None]
        raise ValueError(f"no stable step for the arms {none} on the grid {s['eta_grid']}: widen 'eta_grid' "
                         "downwards or raise 'extend'.")
    reruns = []
    for name, times in (s.get("halvings") or {}).items():   # reruns decided on another piece's seeds
        a = next((a for a in arms if a.name == name), None)
        if a is None or not isinstance(times, int) or times < 1:
            raise ValueError(f"setting 'halvings' maps an arm's name ({[a.name for a in arms]}) to how many "
                             f"times its tuned step was halved (an integer >= 1), got {name!r}: {times!r}.")
        reruns.append({"arm": a.name, "L": a.L, "kind": a.kind, "from": eta[a], "to": eta[a] / 2 ** times,
                       "diverged": None})
        eta[a] /= 2 ** times
    # 4. every arm at its tuned step on the evaluation seeds, with the reruns at half the step
    def run(pending: dict) -> dict:
        plan = [(a, k, e) for a, e in pending.items() for k in s["seeds"]]
        records = _evaluate(s, task, Yt, plan, "tuned", level, dtype, device)
        return {a: [r for r in records if (r["L"], r["arm"]) == a] for a in pending}

    last, failed = rerun_diverged(eta, run, positive_int(s, "max_reruns"))
    for i in range(positive_int(s, "max_reruns")):
        for a in sorted(a for a in arms if len(failed[a]) > i):
            e, bad = failed[a][i]
            reruns.append({"arm": a.name, "L": a.L, "kind": a.kind, "from": e, "to": e / 2,
                           "diverged": len(bad)})
    eta = {a: last[a][0]["eta"] for a in arms}
    # the runs as the reruns left them: the arms never rerun, then those of each rerun in turn
    order = sorted(arms, key=lambda a: (len(failed[a]), a if failed[a] else arms[0]))
    runs = [r for a in order for r in last[a]]
    # 5. the secondary protocol: the common step (the smallest tuned step) for the arms of COMMON_KINDS
    common = min(eta.values())
    again = [a for a in arms if a.kind in COMMON_KINDS]
    runs += [{**r, "protocol": "common"} for r in runs
             if Arm(r["L"], r["arm"]) in again and r["eta"] == common]
    runs += _evaluate(s, task, Yt, [(a, k, common) for a in again if eta[a] != common for k in s["seeds"]],
                      "common", level, dtype, device)
    # 6. float32 against float64 (the deepest arms, a probe seed); 7. the wide FFN: shared by the pieces
    check = shared["precision"]()
    wide = shared["wide"]() if s.get("wide") else None
    return {"N": int(N), "N_val": int(Xv.shape[0]), "n": int(n), "embedding": task.info, "level": level,
            "matched_m": matched_width(s) if s.get("matched") else None,
            "init": init_rows, "init_pilot": pilot, "design_checks": [c.to_json() for c in checks],
            "step_sizes": list(tuned.values()),
            "eta": [{"arm": a.name, "L": a.L, "kind": a.kind, "eta": eta[a]} for a in arms],
            "common_eta": common, "reruns": reruns, "runs": runs,
            "float64_check": check, "baselines": baselines, "wide": wide}


def rerun(s: dict, L: int, kind: str, seed: int, eta: float, steps: int, *, data_dir=None) -> list[float]:
    """The training MSE ``2 Phi_t / (N n)``, ``t = 0..steps``, of the run of arm ``(L, kind)``,
    ``seed`` and step ``eta`` (settings ``s``), computed alone: the spot check of a committed result
    (:mod:`convres.committed`)."""
    task = sst2_data(s, data_dir, dtype_of(s))
    Yt = token_targets(task.Y, task.X.shape[1])
    R, [(_, h)] = _sweep(s, task.X, Yt, [(Arm(L, kind), seed, eta)], steps, dtype_of(s))
    return finite_list(h.loss * 2 / R)


def _precision_check(s: dict, X, Yt, eta: dict, device) -> list[dict] | None:
    """Each arm of the largest depth run in float32 and in float64 from the same (float32-rounded)
    weights (of the first probe seed) and inputs for ``check_steps`` steps at its step: the largest
    relative difference of the loss."""
    if s.get("dtype", "float64") == "float64" or not s.get("check_steps"):
        return None
    out = []
    deepest = max(s["depths"])
    for arm in [a for a in arms_of(s) if deepest == a.L]:
        cfg = arm_config(s, arm)
        p32 = arm_params(s, arm, s["probe_seeds"][0], X, dtype=torch.float32)  # the same in every piece
        curves = {}
        for name, dt in (("float32", torch.float32), ("float64", torch.float64)):
            p = {k: v.to(dt) for k, v in p32.items()}
            mu = eta[arm] / output_rows(cfg, X)
            _, h = gradient_descent(p, X.to(dt), Yt.to(dt), cfg, mu, s["check_steps"], device=device)
            curves[name] = h.loss
        a, b64 = curves["float32"], curves["float64"]
        k = min(len(a), len(b64))
        out.append({"L": arm.L, "arm": arm.kind, "eta": eta[arm], "steps": s["check_steps"],
                    "max_rel_diff": float(np.max(np.abs(a[:k] - b64[:k]) / np.abs(b64[:k])))})
    return out


def _run_sst2_wide(s: dict, task: SST2Task, device) -> dict:
    """The wide-FFN configuration through :func:`convres.theory.ffn_theorem_run` on ``n_train``
    balanced sentences, step ``mu = 1 / (safety L_hat_0)`` (``L_hat_0``: power iteration)."""
    w = s["wide"]
    dtype, half = dtype_of(w), w["n_train"] // 2
    pos, neg = np.nonzero(task.labels == 1)[0][:half], np.nonzero(task.labels == 0)[0][:half]
    if len(pos) < half or len(neg) < half:
        raise ValueError(f"wide: n_train = {w['n_train']} needs {half} sentences of each label among the "
                         f"{len(task.labels)} of the experiment.")
    rows = np.sort(np.concatenate([pos, neg]))
    X, Y = task.X[rows].to(dtype), task.Y[rows].to(dtype)
    cfg = _cfg(s, w["L"], w["beta"], m=w["m"], activation=w["activation"], pool="mean")
    out = []
    for seed in w["seeds"]:
        p = init_params(cfg, seed=seed, dtype=dtype, device=device)
        Xd, Yd = X.to(p["W_U"].device), Y.to(p["W_U"].device)
        L_hat = hessian_norm(p, Xd, Yd, cfg, iters=w["power_iters"], seed=seed)
        mu = 1.0 / (w["safety"] * L_hat)
        r = ffn_theorem_run(p, Xd, Yd, cfg, mu=mu, steps=w["steps"], record_every=w["record_every"],
                            seed=seed, smoothness_iters=w["power_iters"])
        with torch.no_grad():
            Fv = forward(r.params_final, task.X_val.to(dtype).to(Xd.device), cfg)
            F = forward(r.params_final, Xd, cfg)
        out.append({"seed": seed, "L_hat0": L_hat, "mu": mu, "summary": json_safe(r.summary()),
                    "loss": finite_list(r.history.loss / len(rows)),
                    "train_error": float((torch.sign(F) != Yd).double().mean()),
                    "val_accuracy": float((torch.sign(Fv) == task.Y_val.to(Fv)).double().mean())})
    return {"N": int(len(rows)), "m": w["m"], "L": w["L"], "runs": out}


# --- the claims ------------------------------------------------------------------------------------

def _runs_by(runs, protocol: str) -> dict:
    """``{(L, kind): {seed: run}}`` of one protocol."""
    out: dict = {}
    for r in runs:
        if r["protocol"] == protocol:
            out.setdefault((r["L"], r["arm"]), {})[r["seed"]] = r
    return out


def _effects(res: Result) -> dict:
    """The per-unit effects of T1-T4 and their alternatives, positive in the paper's direction,
    ``None`` for a diverged unit: T1 ``ln(MSE_iso / MSE_res)`` per (depth, seed); T2
    ``ln(MSE_matched / MSE_res,Lmax)``; T3 ``ln(MSE_iso,Lmax / MSE_iso,Lmin)``; T4 the mean log-loss
    of the isometric arm minus the residual's (decades)."""
    runs, horizon = res.data["runs"], res.settings["steps"]
    tuned, common = _runs_by(runs, "tuned"), _runs_by(runs, "common")
    depths, seeds = sorted(res.settings["depths"]), sorted(res.settings["seeds"])
    lo, hi = depths[0], depths[-1]

    def ratio(by, a, b, k, field="final_mse", base=math.e):
        x, y = by.get(a, {}).get(k), by.get(b, {}).get(k)
        return None if x is None or y is None else log_ratio(x[field], y[field], base=base)

    def diff(by, a, b, k):
        x, y = by.get(a, {}).get(k), by.get(b, {}).get(k)
        if x is None or y is None or x["mean_log_loss"] is None or y["mean_log_loss"] is None:
            return None
        return x["mean_log_loss"] - y["mean_log_loss"]

    def steps(by, a, b, k):
        x, y = by.get(a, {}).get(k), by.get(b, {}).get(k)
        if x is None or y is None:
            return log_ratio(None, None, base=10.0)
        return log_ratio(level_steps(x, horizon), level_steps(y, horizon), base=10.0)

    units = [(L, k) for L in depths for k in seeds]
    strata = [f"L={L}" for L, _ in units]
    iso, npr, res_, mat = "isometric", "norm-preserving", "residual", "matched"
    return {
        "units": units, "strata": strata, "seeds": seeds, "depths": depths,
        "T1": [ratio(tuned, (L, iso), (L, res_), k) for L, k in units],
        "T1 norm-preserving": [ratio(tuned, (L, npr), (L, res_), k) for L, k in units],
        "T1 common": [ratio(common, (L, iso), (L, res_), k) for L, k in units],
        "T2": [ratio(tuned, (lo, mat), (hi, res_), k) for k in seeds],
        "T2 unmatched": [ratio(tuned, (lo, res_), (hi, res_), k) for k in seeds],
        "T2 common": [ratio(common, (lo, mat), (hi, res_), k) for k in seeds],
        "T3": [ratio(tuned, (hi, iso), (lo, iso), k) for k in seeds],
        "T3 collapsed": [ratio(tuned, (hi, npr), (lo, npr), k) for k in seeds],
        "T3 common": [ratio(common, (hi, iso), (lo, iso), k) for k in seeds],
        "T4": [diff(tuned, (L, iso), (L, res_), k) for L, k in units],
        "T4 steps": [steps(tuned, (L, iso), (L, res_), k) for L, k in units],
        "T4 common": [diff(common, (L, iso), (L, res_), k) for L, k in units]}


def _profile(res: Result) -> str:
    return res.profile if res.profile in ("book", "paper", "smoke") else "smoke"


def _checks(data: dict) -> list[CheckResult]:
    return [CheckResult(c["name"], c["value"], c["threshold"], c["passed"]) for c in data["design_checks"]]


def claim_records(res: Result) -> list:
    """T1-T4 graded by protocol v4 (:func:`convres.experiments.base.claim_record`), with the design
    checks measured at initialization."""
    e, profile, checks = _effects(res), _profile(res), _checks(res.data)
    strata = e["strata"]
    return [
        claim_record("T1", e["T1"], profile=profile, checks=checks, strata=strata,
                     sensitivity={("norm-preserving arm", "tuned"): e["T1 norm-preserving"],
                                  ("ln MSE ratio", "common"): e["T1 common"]}),
        claim_record("T2", e["T2"], profile=profile, checks=checks,
                     sensitivity={("unmatched L = 2", "tuned"): e["T2 unmatched"],
                                  ("ln MSE ratio", "common"): e["T2 common"]}),
        claim_record("T3", e["T3"], profile=profile, checks=checks,
                     sensitivity={("collapsed arm", "tuned"): e["T3 collapsed"],
                                  ("ln MSE ratio", "common"): e["T3 common"]}),
        claim_record("T4", e["T4"], profile=profile, checks=checks, strata=strata,
                     sensitivity={("steps to the level", "tuned"): e["T4 steps"],
                                  ("mean log-loss", "common"): e["T4 common"]})]


def _per_depth_text(e: dict, key: str, scale) -> str:
    parts = []
    for L in e["depths"]:
        v = [x for x, s in zip(e[key], e["strata"]) if s == f"L={L}" and x is not None]
        if v:
            parts.append(f"L={L}: mean {scale(np.mean(v))}, {sum(x > 0 for x in v)}/{len(v)} positive")
    return "; ".join(parts)


def _sst2_claims(res: Result) -> list[dict]:
    e = _effects(res)
    pct = lambda v: f"{100 * math.expm1(v):+.0f}%"  # noqa: E731
    dec = lambda v: f"{v:+.3f} decades"  # noqa: E731
    ln = lambda a, b: rf"$\ln(\mathrm{{MSE}}_{{{a}}}/\mathrm{{MSE}}_{{{b}}})$"  # noqa: E731
    lo, hi = e["depths"][0], e["depths"][-1]
    extra = {
        "T1": dict(figure="fig-sst2-final",
                   criterion="per (depth, seed): " + ln(r"\text{none}", r"\text{res}") + ", final training "
                   "MSE, the isometric arm; reproduced only if reproduced at every depth",
                   evidence=_per_depth_text(e, "T1", pct)),
        "T2": dict(figure="fig-sst2-final", criterion="per seed: " + ln(rf"L = {lo},\ \text{{matched}}",
                                                                        f"L = {hi}") +
                   ", residual arms, final training MSE"),
        "T3": dict(figure="fig-sst2-final", criterion="per seed: " + ln(f"L = {hi}", f"L = {lo}") +
                   r", isometric arm; reproduced iff the interval's lower end $> -\ln 1.1$"),
        "T4": dict(figure="fig-sst2-loss", criterion="per (depth, seed): mean log-loss without minus with "
                   "residuals (isometric arm), in decades", evidence=_per_depth_text(e, "T4", dec))}
    rows = []
    for rec in claim_records(res):
        est = rec.estimate
        measurement = "no interval: " + est.reason if est.effect is None else (
            f"{est.effect:+.3f} [{est.lo:+.3f}, {est.hi:+.3f}], {est.units} units, sign test p = "
            f"{est.sign_test_p:.2g}")
        rows.append(rec.row(**{"measurement": measurement, "evidence": measurement, **extra[rec.id]}))
    return rows


# --- the numbers of the chapter --------------------------------------------------------------------

def heldout_table(data: dict, seeds=None) -> list[dict]:
    """Held-out accuracy on the validation split (not a claim of the paper): per arm and baseline,
    the accuracy's spread over seeds and its difference from the floor and bag-of-words baselines
    over the sentences, with a 95% interval (:func:`convres.stats.estimate`)."""
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
    for (L, kind), v in sorted(by.items(), key=lambda kv: (kv[0][0], ARM_KINDS.index(kv[0][1]))):
        add(f"L={L}, {kind}", "arm", L, v)
    add("floor (least squares, mean vector)", "baseline", None, [b["floor"]["val_correct"]])
    add("floor with twice the dimension", "baseline", None, [b["floor_2d"]["val_correct"]])
    if b.get("bow"):
        add("bag of words, logistic regression", "baseline", None, [b["bow"]["val_correct"]])
    if b.get("adam"):
        add("reference Transformer (Adam)", "baseline", None, [r["val_correct"] for r in b["adam"]])
    return rows


def _without_correct(v):
    """A baseline's record without its per-sentence ``val_correct`` (the summary keeps the numbers)."""
    if isinstance(v, dict):
        return {k: x for k, x in v.items() if k != "val_correct"}
    return [_without_correct(x) for x in v] if isinstance(v, list) else v


_MODEL_FIELDS = ("final_mse", "mean_log_loss", "train_error", "within_sentence", "pooled_sigma_ratio")
_STEP_KEYS = ("arm", "L", "kind", "grid", "scores", "stable", "horizon", "best", "largest_stable", "chosen",
              "bracketed", "unresolved", "capped")


def _sst2_numbers(res: Result) -> dict:
    data, horizon = res.data, res.settings["steps"]
    per_model = []
    for protocol in ("tuned", "common"):
        for (L, kind), by_seed in _runs_by(data["runs"], protocol).items():
            rs = list(by_seed.values())
            per_model.append({
                "protocol": protocol, "L": L, "arm": kind, "residual": kind in ("residual", "matched"),
                "eta": rs[0]["eta"], **{k: spread([r[k] for r in rs]) for k in _MODEL_FIELDS},
                "initial_mse": spread([r["mse"][0] for r in rs]),
                "steps_to_level": spread([level_steps(r, horizon) for r in rs]),
                "censored": sum(r["steps_to_level"] is None and r["status"] != "diverged" for r in rs),
                "diverged": sum(r["status"] == "diverged" for r in rs)})
    wide = data.get("wide")
    return {"n_train": data["N"], "n_val": data["N_val"], "d": res.settings["d"], "readout": "per token",
            "level": data["level"], "matched_m": data["matched_m"],
            "init_output_std": _init_table(res.settings, data["init"]),
            **protocol_summary(_checks(data)),
            "step_sizes": step_table(data["step_sizes"], _STEP_KEYS),
            "eta": data["eta"], "common_eta": data["common_eta"], "reruns": data["reruns"],
            "per_model": per_model, "heldout": heldout_table(data),
            "baselines": {k: _without_correct(v) for k, v in data["baselines"].items()},
            "float64_check": data["float64_check"],
            "wide": None if wide is None else {"N": wide["N"], "m": wide["m"], "L": wide["L"],
                                               "runs": [{k: r[k] for k in ("seed", "mu", "train_error",
                                                                          "val_accuracy", "summary")}
                                                        for r in wide["runs"]]}}


def _shapes(s: dict) -> list[Shape]:
    out = [Shape(f"sst2 {a.name}", arm_config(s, a), s["n_train"], s["n_tokens"],
                 "per-token outputs (the sentence's target at every token)") for a in arms_of(s)
           if a.kind in ("residual", "matched")]
    w = s.get("wide")
    if w:
        out.append(Shape(f"sst2 wide FFN (L={w['L']}, m={w['m']})",
                         _cfg(s, w["L"], w["beta"], m=w["m"], activation=w["activation"], pool="mean"),
                         w["n_train"], s["n_tokens"], "the wide-FFN configuration, pooled readout"))
    return out


def _report(res: Result) -> dict:
    s, d, k = res.settings, res.data, res.summary()
    spread_rows = []
    for m in sorted((m for m in k["per_model"] if m["protocol"] == "tuned"),
                    key=lambda m: (m["L"], ARM_KINDS.index(m["arm"]))):
        for field, label in (("final_mse", "final training MSE"),
                             ("mean_log_loss", "mean log-loss (decades)")):
            spread_rows.append(spread_row(f"$L = {m['L']}$, {m['arm']}, own step", label, m[field], "{:.3f}"))
    w = d.get("wide")
    deviations = [
        {"what": "SST-2 inputs", "paper": "not stated",
         "book": f"first {s['n_tokens']} tokens, no masks; frozen PPMI-SVD vectors, $d = {s['d']}$",
         "why": "keeps the theory's fixed-size X; no pretrained download"},
        {"what": "SST-2 readout", "paper": "not stated",
         "book": "the sentence's target at every token (per-token loss); prediction: the mean output",
         "why": "a mean-pooled loss cannot see a collapse of the rows within a sentence"},
        {"what": "SST-2 initialization", "paper": "Gaussian, 'proper'",
         "book": r"residual: branch scale $1/\sqrt{L}$; no residual: an isometric init (graded) and "
                 "norm-preserving gains (LSUV, collapsed at depth; beside it)",
         "why": "separates a collapse at initialization from what gradient descent does"},
        {"what": "SST-2 matched shallow arm", "paper": "none",
         "book": f"$L = {min(s['depths'])}$ with $m = {d['matched_m']}$, the parameter count of "
                 f"$L = {max(s['depths'])}$",
         "why": "'improves with depth' about depth, not parameters"}]
    if w:
        deviations.append({"what": "SST-2 wide FFN", "paper": "none",
                           "book": f"$L = {w['L']}$, $m = {w['m']}$ on {w['N']} of the training sentences",
                           "why": r"the FFN theorem needs $m \ge N$; a subset keeps its cost small"})
    return {
        "settings": {"book": f"$N =$ {d['N']:,} training and {d['N_val']} GLUE validation sentences, first "
                             f"{s['n_tokens']} tokens; frozen PPMI-SVD vectors $d = {s['d']}$; "
                             f"$m = {s['m']}$, {s['activation']}; $L$ in {s['depths']}; "
                             f"{len(arms_of(s))} arms; per-token "
                             f"loss; each arm at its own step; {s['steps']} steps; {len(s['seeds'])} seeds; "
                             f"{s['dtype']}",
                     "why": "fixed length without masks keeps the theory's X; a per-token loss sees the "
                            "rows; every arm alive at initialization, one arm without residuals not "
                            "collapsed"},
        "spread": spread_rows,
        "runs": len(d["runs"]) + probe_count(s, d["step_sizes"]) + (len(w["runs"]) if w else 0)
        + len(d.get("float64_check") or []),
        "deviations": deviations,
    }


_WIDE = dict(n_train=256, m=1024, L=2, beta=1.0, activation="gelu", seeds=[0], steps=60, record_every=20,
             power_iters=5, safety=2.0, dtype="float64")
_SST2 = dict(n_tokens=10, n_val=None, embedding="ppmi", vocab_size=5000, emb_seed=0, d=16, d_qk=16, m=16,
             activation="gelu", depths=[2, 6, 10], arms=["residual", "isometric", "norm-preserving"],
             matched=True,
             identity_gain=6.0, preactivation=0.05,
             eta_grid=[0.03125, 0.0625, 0.125, 0.25], extend=8, probe_seeds=[100, 101, 102], max_reruns=3,
             halvings={}, record_every=10, check_steps=20, dtype="float32",
             pilot_seeds=[200, 201], bow=dict(lambdas=[0.01, 0.1, 1.0, 10.0, 100.0], folds=5, iters=100),
             adam=dict(L=2, m=16, lr=0.01, steps=300, every=10, holdout=5, seeds=[0, 1, 2]))

EXPERIMENT = Experiment(
    "sst2", "SST-2: depth L = 2, 6, 10 with and without residual connections, GLUE validation accuracy",
    "book/sst2.md",
    {"book": dict(_SST2, n_train=2048, seeds=list(range(10)), probe_steps=50, steps=200, wide=_WIDE),
     "paper": dict(_SST2, n_train=16384, seeds=list(range(20)), probe_steps=60, steps=250,
                   wide=dict(_WIDE, n_train=1024, m=2048, steps=200)),
     "smoke": dict(_SST2, n_train=16, depths=[1, 2], seeds=[0, 1], probe_seeds=[100], eta_grid=[0.1, 0.2],
                   extend=8, probe_steps=3, steps=10, record_every=5, check_steps=3, vocab_size=300,
                   bow=dict(lambdas=[1.0, 10.0], folds=2, iters=20),
                   adam=dict(L=1, m=4, lr=0.01, steps=10, every=5, holdout=4, seeds=[0]),
                   wide=dict(_WIDE, n_train=8, m=16, L=1, steps=5, record_every=5, power_iters=3))},
    _run_sst2, _sst2_numbers, _sst2_claims, plot_sst2, shapes=_shapes, report=_report, piece_seeds=1,
    committed=("book", "paper"),
    paper="SST-2, $L = 2, 6, 10$ with and without residuals; subset, embeddings, steps not stated")
