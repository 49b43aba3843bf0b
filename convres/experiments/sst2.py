"""SST-2: depth L = 2, 6, 10 with and without residual connections, GLUE validation accuracy.

Book chapter *SST-2* (``book/sst2.md``). Sentences of the GLUE training split cut to their first
``n_tokens`` tokens (one length: no padding, no mask), frozen PPMI-SVD word vectors computed from
the unlabelled training text, targets +-1 at **every token** (a per-token loss over all ``N n``
rows, the model's own readout without pooling). Each arm keeps its signal at order one at
initialization: the residual stacks with the ``1/sqrt(L)`` branch scale of
:func:`convres.model.init_params`, the stacks without residuals with the norm-preserving gains of
:func:`norm_preserving_init`. Every arm (depth x residual) runs at its own step, chosen by
:func:`convres.stats.tune_step` on probe seeds that are not the evaluation seeds; the claims are
graded by :func:`convres.stats.claim_verdict` with the margins below.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from ..data import embed_tokens, embed_with, load_sst2, ppmi_embeddings, sst2_prefixes
from ..gd import Step, gradient_descent, loss_and_grad, sweep
from ..lemmas import hessian_norm
from ..model import ModelConfig, attention_scale, block, forward, forward_trace, init_params, layer_params
from ..plotting import plot_sst2
from ..runtime import check_device
from ..stats import censored, claim_stats, claim_verdict, kendall_tau, steps_to, tune_step
from ..theory import ffn_theorem_run
from ..values import json_safe
from .base import (
    Experiment,
    Result,
    Shape,
    dtype_of,
    finite_list,
    output_rows,
    positive_int,
    shared_by_pieces,
    spread,
    stable,
)

__all__ = ["EXPERIMENT", "SST2Task", "sst2_data", "pooled_baseline", "SST2_PROBE_WORDS", "token_targets",
           "norm_preserving_init", "arm_params", "MARGIN_LOWER", "MARGIN_DEPTH", "MARGIN_NO_DEPTH",
           "MARGIN_SPEED"]

#: The claims' margins, written down before any run of this design (the verdict rule of
#: :func:`convres.stats.claim_verdict`: *reproduced* needs the interval's lower end above the margin).
#: With residuals the final training MSE is at least 10% lower than without (per depth and seed).
MARGIN_LOWER = 0.10
#: With residuals the deepest stack's final training MSE is at least 10% below the shallowest's.
MARGIN_DEPTH = 0.10
#: Without residuals the deepest stack's final training MSE is not below the shallowest's.
MARGIN_NO_DEPTH = 0.0
#: With residuals at least 20% fewer steps to the loss level (the floor baseline's training MSE).
MARGIN_SPEED = 0.20


#: Words whose nearest neighbours the SST-2 chapter shows (a look at what the embeddings carry).
SST2_PROBE_WORDS = ("good", "bad", "funny", "boring")


class SST2Task(NamedTuple):
    """The book's SST-2 task (chapter *SST-2*).

    ``X`` ``(N, n, d)``, ``Y`` ``(N, 1)`` (``+1`` positive, ``-1`` negative) and ``labels`` (0/1)
    for the training sentences; ``X_val``, ``Y_val``, ``labels_val`` for the GLUE validation split;
    ``tokens``, ``tokens_val``: the token lists; ``info``: the vocabulary size, the fraction of tokens
    outside the vocabulary and a few nearest neighbours.
    """

    X: torch.Tensor
    Y: torch.Tensor
    labels: np.ndarray
    X_val: torch.Tensor
    Y_val: torch.Tensor
    labels_val: np.ndarray
    tokens: list
    tokens_val: list
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
    """The book's SST-2 task (chapter *SST-2*): sentences, embeddings, targets.

    Training: the first ``n_train / 2`` negative and ``n_train / 2`` positive sentences (file order)
    of the GLUE training split with at least ``n_tokens`` tokens, cut to their first ``n_tokens``
    (:func:`convres.data.sst2_prefixes`). Validation: every sentence of the GLUE validation split
    with at least ``n_tokens`` tokens, cut the same way. Embeddings: frozen PPMI-SVD word vectors
    of dimension ``d`` computed from the text of the whole training split (no labels;
    :func:`convres.data.ppmi_embeddings`), each coordinate standardized over the training tokens
    (:func:`convres.data.embed_with`).
    """
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
    return SST2Task(X, target(labels), labels, Xv, target(labels_val), labels_val, tokens, tokens_val, info)


def pooled_baseline(X: torch.Tensor, labels: np.ndarray, X_val: torch.Tensor, labels_val: np.ndarray) -> dict:
    """The floor baseline of the SST-2 chapter: least squares from the mean-pooled token vectors
    (with an intercept) to the targets ``+-1``; returns training and validation accuracy and the
    training mean squared error (the same at every token: it predicts one value per sentence)."""
    A = np.c_[X.double().mean(1).cpu().numpy(), np.ones(len(labels))]
    B = np.c_[X_val.double().mean(1).cpu().numpy(), np.ones(len(labels_val))]
    y = 2.0 * labels - 1.0
    w = np.linalg.lstsq(A, y, rcond=None)[0]
    return {"train_accuracy": float(((A @ w > 0) == labels).mean()),
            "val_accuracy": float(((B @ w > 0) == labels_val).mean()),
            "train_mse": float(np.mean((A @ w - y) ** 2))}



def token_targets(Y: torch.Tensor, n: int) -> torch.Tensor:
    """The per-token targets ``(N, n, 1)``: the sentence's target ``+-1`` at each of its ``n``
    tokens. The loss (5) over these rows is ``n`` times the pooled loss of the mean output plus the
    spread of the outputs within each sentence: ``sum_t (F_t - y)^2 = n (Fbar - y)^2 +
    sum_t (F_t - Fbar)^2``."""
    return Y[:, None, :].expand(-1, n, -1).contiguous()


def _rms(t: torch.Tensor) -> float:
    return float(t.double().pow(2).mean().sqrt())


def norm_preserving_init(cfg: ModelConfig, X: torch.Tensor, seed: int = 0, *,
                         dtype=torch.float64) -> dict[str, torch.Tensor]:
    """The initialization of a stack *without* residual connections that keeps its signal at order
    one (layer-sequential unit-variance scaling, LSUV, Mishkin and Matas 2016): the Gaussian
    weights of :func:`convres.model.init_params` with branch scale 1 (the same draws as the
    residual model of the same seed), then for ``l = 1, ..., L`` the gains

        W_V^(l) <- W_V^(l) RMS(H_{l-1}) / RMS(A_l),    W_2^(l) <- W_2^(l) RMS(H_{l-1}) / RMS(H_l)

    measured on the inputs ``X`` (``H_0 = X``), so that each block's attention output ``A_l`` and
    output ``H_l`` have the root mean square of its input. Without residuals ``A_l`` is linear in
    ``W_V`` and ``H_l`` in ``W_2``, so each gain sets its RMS exactly.
    """
    if cfg.residual != (0.0, 0.0):
        raise ValueError(f"norm_preserving_init is the init of the model without residual connections; "
                         f"got residual coefficients {cfg.residual}.")
    p = init_params(cfg, seed, dtype=dtype, branch_scale=1.0)
    s, act = attention_scale(cfg), cfg.act
    H = X.to(dtype=dtype, device=p["W_U"].device)
    with torch.no_grad():
        for l in range(1, cfg.L + 1):
            for name, k in (("W_V", 2), ("W_2", 5)):   # block() returns (logits, S, A, Z, M, H)
                out = block(H, layer_params(p, l), s=s, act=act, beta_attn=0.0, beta_ffn=0.0)
                p[f"layer{l}.{name}"] = p[f"layer{l}.{name}"] * (_rms(H) / _rms(out[k]))
            H = block(H, layer_params(p, l), s=s, act=act, beta_attn=0.0, beta_ffn=0.0)[5]
    return p


def _cfg(s: dict, L: int, beta: float, **changes) -> ModelConfig:
    return ModelConfig(**{**dict(d=s["d"], d_qk=s["d_qk"], m=s["m"], c=1, L=L, beta=beta, pool=None,
                                 activation=s["activation"]), **changes})


def arm_params(s: dict, L: int, beta: float, seed: int, X: torch.Tensor, *, dtype=torch.float64,
               init: str | None = None) -> dict[str, torch.Tensor]:
    """The initial weights of one arm: with residuals (``beta > 0``) the branch scale ``1/sqrt(L)``
    of :func:`convres.model.init_params`; without, :func:`norm_preserving_init` on the training
    inputs ``X`` (or, with ``init="branch"``, the ``1/sqrt(L)`` init of the residual arm, the
    earlier choice of the book). Both start from the same Gaussian draws for a given seed."""
    init = init or s.get("init_no_residual", "norm_preserving")
    cfg = _cfg(s, L, beta)
    if beta or init == "branch":
        return init_params(cfg, seed, dtype=dtype)
    if init != "norm_preserving":
        raise ValueError(f"setting 'init_no_residual' must be 'norm_preserving' or 'branch', got {init!r}.")
    return norm_preserving_init(cfg, X, seed, dtype=dtype)


def _arm(L: int, beta: float) -> str:
    return f"L={L}, " + ("residual" if beta else "no residual")


def _pooled_sigma(H: torch.Tensor) -> tuple[float, float]:
    """``(sigma_min, sigma_min / sigma_max)`` of the pooled features: the ``N x d`` matrix of the
    sentences' mean rows of the last ``H``."""
    sv = torch.linalg.svdvals(H.double().mean(-2))
    return float(sv[-1]), float(sv[-1] / sv[0])


_INIT_FIELDS = ("std", "rms_H", "grad_norm", "within_sentence", "pooled_sigma_ratio", "mse")


def _init_rows(s: dict, X: torch.Tensor, Yt: torch.Tensor) -> list[dict]:
    """The scale of every arm at initialization (float64), one record per arm and evaluation
    seed: the std of the outputs ``F``, the RMS of the last ``H``, the gradient norm of the mean
    loss ``||grad Phi|| / (N n)``, the share of the last ``H`` that varies within a sentence
    (``RMS(H - mean_t H) / RMS(H)``), ``sigma_min / sigma_max`` of the pooled features and the MSE."""
    X, Yt = X.double(), Yt.double()
    rows = []
    arms = [(b, None) for b in sorted(s["betas"], reverse=True)] + [(0.0, "branch")]
    for L in s["depths"]:
        for beta, init in arms:
            cfg = _cfg(s, L, beta)
            for seed in s["seeds"]:
                phi, g, tr = loss_and_grad(arm_params(s, L, beta, seed, X, init=init), X, Yt, cfg)
                H, R = tr.H[-1], output_rows(cfg, X)
                grad = math.sqrt(sum(float(v.pow(2).sum()) for v in g.values())) / R
                vals = [float(tr.F.std()), _rms(H), grad, _rms(H - H.mean(-2, keepdim=True)) / _rms(H),
                        _pooled_sigma(H)[1], 2 * float(phi) / R]
                rows.append({"L": L, "residual": bool(beta), "seed": seed,
                             "init": "1/sqrt(L) branch scale" if beta or init else "norm-preserving gains",
                             "trained": init is None, **dict(zip(_INIT_FIELDS, vals))})
    return rows


def _init_table(records: list[dict]) -> list[dict]:
    """The records of :func:`_init_rows` as one row per arm, each field the median over the seeds."""
    arms: dict = {}
    for r in records:
        arms.setdefault((r["L"], r["residual"], r["init"], r["trained"]), []).append(r)
    return [{"L": L, "residual": res, "init": init, "trained": trained,
             **{f: float(np.median([r[f] for r in rs])) for f in _INIT_FIELDS}}
            for (L, res, init, trained), rs in arms.items()]


def _tune(s: dict, X, Yt, L: int, beta: float, dtype, device) -> dict:
    """The arm's step ``eta`` (``mu = eta / (N n)``): :func:`convres.stats.tune_step` on the
    factor-2 grid ``eta_grid``, scored by the median final training MSE of the probe seeds after
    ``probe_steps`` steps (``inf`` unless every probe run is stable: not diverged, ending below its
    start)."""
    cfg = _cfg(s, L, beta)
    R = output_rows(cfg, X)
    starts = [arm_params(s, L, beta, seed, X, dtype=dtype) for seed in s["probe_seeds"]]

    def score(eta: float) -> float:
        out = sweep(starts, X, Yt, cfg, eta / R, s["probe_steps"], device=device)
        if not all(stable(h) for _, h in out):
            return math.inf
        return float(np.median([h.loss[-1] for _, h in out])) * 2 / R

    t = tune_step(score, s["eta_grid"], extend=s.get("extend", 6))
    return {"arm": _arm(L, beta), "L": L, "residual": bool(beta), **t,
            "scores": [None if math.isinf(v) else v for v in t["scores"]]}


def _run_sst2(s: dict, *, progress=False, data_dir=None, device=None) -> dict:
    dtype = dtype_of(s)
    task = sst2_data(s, data_dir, dtype)
    X, Xv, Yv = task.X, task.X_val, task.Y_val
    N, n = X.shape[:2]
    Yt = token_targets(task.Y, n)
    every, steps = positive_int(s, "eval_every"), positive_int(s, "steps")
    if set(s["seeds"]) & set(s["probe_seeds"]):
        raise ValueError(f"setting 'probe_seeds' {s['probe_seeds']} must not share a seed with 'seeds' "
                         f"{s['seeds']}: the steps are chosen on seeds that are not evaluated.")
    # 1. the floor baseline, whose training MSE is the level of the speed claim
    hashed = pooled_baseline(embed_tokens(task.tokens, s["d"], seed=s["emb_seed"]), task.labels,
                             embed_tokens(task.tokens_val, s["d"], seed=s["emb_seed"]), task.labels_val)
    floor = pooled_baseline(X, task.labels, Xv, task.labels_val)
    twice = sst2_data({**s, "d": 2 * s["d"]}, data_dir, dtype)     # does the floor gain from a larger d?
    baselines = {"ppmi": floor, "hashed": hashed,
                 "ppmi_2d": pooled_baseline(twice.X, twice.labels, twice.X_val, twice.labels_val),
                 "majority_val_accuracy": float(max(task.labels_val.mean(), 1 - task.labels_val.mean()))}
    level = floor["train_mse"]
    # 2. every arm at initialization
    init_rows = _init_rows(s, X, Yt)
    # 3. each arm's step, on the probe seeds
    arms = [(L, b) for L in s["depths"] for b in s["betas"]]

    def tune(L: int, beta: float) -> dict:  # one cache entry an arm: kept if a run stops
        return shared_by_pieces("tune-sst2", s, device, lambda: _tune(s, X, Yt, L, beta, dtype, device),
                                arm=[L, beta])

    tuned = {a: tune(*a) for a in arms}
    # 4. every arm at its step, on the evaluation seeds (the same draws for both arms of a seed)
    meta = [(a, seed) for a in arms for seed in s["seeds"]]
    cfgs = [_cfg(s, *a) for a, _ in meta]
    R = output_rows(cfgs[0], X)
    Xv_d, Yv_d = (t.to(check_device(device)) for t in (Xv, Yv))
    errors: list[list[float]] = [[] for _ in meta]
    accs: list[list[float]] = [[] for _ in meta]

    def evaluate(step: Step):  # the sentence's output is the mean of its tokens' outputs
        if step.t % every == 0 or step.t == steps:
            F = step.trace.F.mean(-2)
            errors[step.index].append(float((torch.sign(F) != task.Y.to(F.device)).double().mean()))
            with torch.no_grad():
                Fv = forward(step.params, Xv_d, cfgs[step.index]).mean(-2)
            accs[step.index].append(float((torch.sign(Fv) == Yv_d).double().mean()))

    starts = [arm_params(s, *a, seed, X, dtype=dtype) for a, seed in meta]
    out = sweep(starts, X, Yt, cfgs, [tuned[a]["chosen"] / R for a, _ in meta], steps, progress=progress,
                callback=evaluate, device=device)
    runs = []
    for (a, seed), cfg, (p, h), er, acc in zip(meta, cfgs, out, errors, accs):
        mse = h.loss * 2 / R
        with torch.no_grad():
            H = forward_trace(p, X.to(p["W_U"].device), cfg).H[-1]
        sig_min, sig_ratio = _pooled_sigma(H)
        runs.append(dict(L=a[0], beta=a[1], seed=seed, eta=tuned[a]["chosen"], mu=tuned[a]["chosen"] / R,
                         status=h.status, mse=finite_list(mse), error=er, val_accuracy=acc,
                         steps_to_level=steps_to(list(mse), level, relative=False),
                         pooled_sigma_min=sig_min, pooled_sigma_ratio=sig_ratio))
    # 5. float32 against float64: the deepest arms, the same inputs and initial weights; 6. the wide
    # FFN; both on a probe seed, so the same in every piece
    check = shared_by_pieces("precision-sst2", s, device, lambda: _precision_check(s, X, Yt, tuned, device))
    wide = shared_by_pieces("wide-sst2", s, device, lambda: _run_sst2_wide(s, task, device)) \
        if s.get("wide") else None
    return {"N": int(N), "N_val": int(Xv.shape[0]), "n": int(n), "embedding": task.info, "level": level,
            "init": init_rows, "step_sizes": list(tuned.values()), "runs": runs,
            "eval_steps": [t for t in range(steps + 1) if t % every == 0 or t == steps],
            "float64_check": check, "baselines": baselines, "wide": wide}


def rerun(s: dict, L: int, beta: float, seed: int, eta: float, steps: int, *, data_dir=None) -> list[float]:
    """The training MSE ``2 Phi_t / (N n)``, ``t = 0..steps``, of the run of :func:`_run_sst2` with
    depth ``L``, ``beta``, ``seed`` and step ``eta`` (settings ``s``), computed alone: the spot
    check of a committed result (:mod:`convres.committed`)."""
    dtype = dtype_of(s)
    task = sst2_data(s, data_dir, dtype)
    cfg = _cfg(s, L, beta)
    R = output_rows(cfg, task.X)
    [(_, h)] = sweep([arm_params(s, L, beta, seed, task.X, dtype=dtype)], task.X,
                     token_targets(task.Y, task.X.shape[1]), cfg, eta / R, steps)
    return finite_list(h.loss * 2 / R)


def _precision_check(s: dict, X, Yt, tuned: dict, device) -> list[dict] | None:
    """Each arm of the largest depth run in float32 and in float64 from the same (float32-rounded)
    weights (of the first probe seed) and inputs for ``check_steps`` steps at its step: the largest
    relative difference of the loss."""
    if s.get("dtype", "float64") == "float64" or not s.get("check_steps"):
        return None
    L, out = max(s["depths"]), []
    for beta in sorted(s["betas"]):
        cfg, eta = _cfg(s, L, beta), tuned[(L, beta)]["chosen"]
        p32 = arm_params(s, L, beta, s["probe_seeds"][0], X, dtype=torch.float32)  # the same in every piece
        curves = {}
        for name, dt in (("float32", torch.float32), ("float64", torch.float64)):
            p = {k: v.to(dt) for k, v in p32.items()}
            _, h = gradient_descent(p, X.to(dt), Yt.to(dt), cfg, eta / output_rows(cfg, X), s["check_steps"],
                                    device=device)
            curves[name] = h.loss
        a, b64 = curves["float32"], curves["float64"]
        k = min(len(a), len(b64))
        out.append({"L": L, "beta": beta, "eta": eta, "steps": s["check_steps"],
                    "max_rel_diff": float(np.max(np.abs(a[:k] - b64[:k]) / np.abs(b64[:k])))})
    return out


def _run_sst2_wide(s: dict, task: SST2Task, device) -> dict:
    """The wide-FFN configuration, run through the FFN theorem's check
    (:func:`convres.theory.ffn_theorem_run`): the first ``n_train`` training sentences of the
    experiment (balanced), width ``m``, depth ``L``, step ``mu = 1 / (safety L_hat_0)`` with
    ``L_hat_0`` the power-iteration estimate of the Hessian norm at the initialization."""
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



def _final(r) -> float:
    """The run's final training MSE (``inf`` for a diverged run)."""
    v = r["mse"][-1]
    return math.inf if v is None or r["status"] == "diverged" else float(v)


def _clip(e: float) -> float:
    """A per-unit effect in ``[-1, 1]``: a diverged run (final MSE ``inf``) counts as the largest
    effect against its arm, and no single unit outweighs the others by more than that."""
    return float(min(1.0, max(-1.0, e)))


def _by_arm(runs) -> dict:
    """``{(L, beta): {seed: run}}``."""
    out: dict = {}
    for r in runs:
        out.setdefault((r["L"], r["beta"]), {})[r["seed"]] = r
    return out


def _steps(r, horizon: int) -> tuple[float, bool]:
    return censored(r["steps_to_level"], horizon)


def _effects(res: Result) -> dict:
    """The per-unit effects of the claims, each signed so that positive is the paper's direction:
    ``lower[L]``: ``1 - MSE_res / MSE_none`` per seed (paired: the same draws); ``depth``:
    ``1 - MSE_res(L_max) / MSE_res(L_min)`` per seed; ``no_depth``: ``MSE_none(L_max) /
    MSE_none(L_min) - 1`` per seed; ``speed[L]``: ``1 - T_res / T_none`` per seed, with the steps
    ``T`` to the level censored at the horizon (both censored: 0). Every effect is clipped to
    ``[-1, 1]`` (a diverged run: ``-1`` against its arm's side)."""
    runs, horizon = res.data["runs"], res.settings["steps"]
    arm = _by_arm(runs)
    depths = sorted({r["L"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    lo, hi = depths[0], depths[-1]
    out: dict = {"depths": depths, "seeds": seeds, "lower": {}, "speed": {}, "censored": {}}
    for L in depths:
        res_, none = arm[(L, 1.0)], arm[(L, 0.0)]
        out["lower"][L] = [_clip(1 - _final(res_[k]) / _final(none[k])) for k in seeds]
        t = [(_steps(res_[k], horizon), _steps(none[k], horizon)) for k in seeds]
        out["speed"][L] = [_clip(1 - a[0] / b[0]) if b[0] > 0 else 0.0 for a, b in t]
        out["censored"][L] = {"residual": sum(a[1] for a, _ in t), "no residual": sum(b[1] for _, b in t),
                              "both": sum(a[1] and b[1] for a, b in t)}
    out["depth"] = [_clip(1 - _final(arm[(hi, 1.0)][k]) / _final(arm[(lo, 1.0)][k])) for k in seeds]
    out["no_depth"] = [_clip(_final(arm[(hi, 0.0)][k]) / _final(arm[(lo, 0.0)][k]) - 1) for k in seeds]
    out["tau_res"] = [kendall_tau(depths, [-_final(arm[(L, 1.0)][k]) for L in depths]) for k in seeds]
    out["tau_none"] = [kendall_tau(depths, [-_final(arm[(L, 0.0)][k]) for L in depths]) for k in seeds]
    return out


def _per_depth(effects: dict, margin: float) -> dict:
    """``{L: (claim_stats, verdict)}`` for effects given per depth."""
    return {L: (st, claim_verdict(st)) for L, e in effects.items() for st in [claim_stats(e, margin)]}


def _some(per: dict) -> bool:
    """Whether a claim graded per depth is *reproduced* at some depths but not at all of them."""
    verdicts = [v for _, v in per.values()]
    return "reproduced" in verdicts and any(v != "reproduced" for v in verdicts)


def _fmt_ci(st: dict, pct: bool = True) -> str:
    f = (lambda v: f"{100 * v:+.1f}%") if pct else (lambda v: f"{v:+.3g}")
    return f"{f(st['effect'])} [{f(st['ci'][0])}, {f(st['ci'][1])}], {st['agree']}/{st['units']} agree"


_STEP_KEYS = ("arm", "L", "residual", "grid", "scores", "chosen", "bracketed")


def _sst2_numbers(res: Result) -> dict:
    data, runs = res.data, res.data["runs"]
    horizon = res.settings["steps"]
    per_model = []
    for (L, b), by_seed in _by_arm(runs).items():
        rs = list(by_seed.values())
        t = [_steps(r, horizon) for r in rs]
        per_model.append({
            "protocol": "best", "L": L, "residual": bool(b), "eta": rs[0]["eta"],
            "train_mse": spread([None if r["status"] == "diverged" else r["mse"][-1] for r in rs]),
            "initial_mse": spread([r["mse"][0] for r in rs]),
            "train_error": spread([r["error"][-1] for r in rs]),
            "val_accuracy": spread([r["val_accuracy"][-1] for r in rs]),
            "steps_to_level": spread([v for v, _ in t]), "censored": int(sum(c for _, c in t)),
            "pooled_sigma_ratio": spread([r["pooled_sigma_ratio"] for r in rs]),
            "diverged": sum(r["status"] == "diverged" for r in rs)})
    e = _effects(res)
    paired = {  # each depth's statistics and its verdict by the report's rule
        key: {str(L): {**st, "verdict": v} for L, (st, v) in _per_depth(e[key], margin).items()}
        for key, margin in (("lower", MARGIN_LOWER), ("speed", MARGIN_SPEED))} | {
        "censored": {str(L): v for L, v in e["censored"].items()}}
    wide = data.get("wide")
    return {"n_train": data["N"], "n_val": data["N_val"], "d": res.settings["d"], "readout": "per token",
            "level": data["level"],
            "margins": {"lower": MARGIN_LOWER, "depth": MARGIN_DEPTH, "no_depth": MARGIN_NO_DEPTH,
                        "speed": MARGIN_SPEED},
            "init_output_std": _init_table(data["init"]),
            "step_sizes": [{k: t[k] for k in _STEP_KEYS} for t in data["step_sizes"]],
            "per_model": per_model, "paired": paired,
            "baselines": data["baselines"], "float64_check": data["float64_check"],
            "wide": None if wide is None else {"N": wide["N"], "m": wide["m"], "L": wide["L"],
                                               "runs": [{k: r[k] for k in ("seed", "mu", "train_error",
                                                                          "val_accuracy", "summary")}
                                                        for r in wide["runs"]]}}


def _sst2_claims(res: Result) -> list[dict]:
    e = _effects(res)
    depths, lo, hi = e["depths"], e["depths"][0], e["depths"][-1]
    level = res.data["level"]
    rows = []
    # 1. lower training loss with residuals: units (L, seed)
    per = _per_depth(e["lower"], MARGIN_LOWER)
    st = claim_stats([v for L in depths for v in e["lower"][L]], MARGIN_LOWER)
    rows.append(dict(
        claim="With residual connections the training loss is consistently lower.",
        criterion=f"paired per (depth, seed), each arm at its own tuned step: effect = 1 - MSE(residual) / "
                  f"MSE(no residual) of the final training MSE; margin {MARGIN_LOWER:.0%}; partly also "
                  "when the claim holds at some depths only",
        measurement="; ".join(f"L={L}: {_fmt_ci(st_)} ({v})" for L, (st_, v) in per.items()),
        verdict=claim_verdict(st, some_regimes=_some(per)), figure="fig-sst2-final",
        evidence="relative reduction of the final training MSE per seed: " + "; ".join(
            f"L={L} " + ", ".join(f"{100 * v:+.0f}%" for v in e["lower"][L]) for L in depths), **st))
    # 2. with residuals, deeper is better; 3. without residuals, depth does not help
    for claim, key, taus, margin, effect in (
            ("With residuals, the training loss improves with depth.", "depth", "tau_res",
             MARGIN_DEPTH, f"residual arm: effect = 1 - MSE(L={hi}) / MSE(L={lo}) of the final "
                           f"training MSE; margin {MARGIN_DEPTH:.0%}"),
            ("Without residuals, depth does not help.", "no_depth", "tau_none", MARGIN_NO_DEPTH,
             f"arm without residuals: effect = MSE(L={hi}) / MSE(L={lo}) - 1 of the final training "
             f"MSE (positive: the deeper stack is not better); margin {MARGIN_NO_DEPTH:g}")):
        st = claim_stats(e[key], margin)
        row = dict(
            claim=claim, criterion=f"paired per seed, {effect}",
            measurement=_fmt_ci(st) + "; Kendall tau of L against -MSE per seed: " + ", ".join(
                f"{t:+.2f}" for t in e[taus]),
            verdict=claim_verdict(st), figure="fig-sst2-final",
            evidence="per seed: " + ", ".join(f"{100 * v:+.0f}%" for v in e[key]), **st)
        if row["verdict"] == "inconclusive":
            row["reason"] = "the seeds disagree and the interval straddles 0"
        rows.append(row)
    # 4. speed: steps to the level, censored at the horizon
    per = _per_depth(e["speed"], MARGIN_SPEED)
    st = claim_stats([v for L in depths for v in e["speed"][L]], MARGIN_SPEED)
    both = sum(c["both"] for c in e["censored"].values())
    row = dict(
        claim="With residuals, gradient descent reaches a fixed training loss in fewer steps.",
        criterion=f"paired per (depth, seed): effect = 1 - T(residual) / T(no residual), T the first step "
                  f"with training MSE <= {level:.3f} (the floor baseline's training MSE), censored at the "
                  f"horizon of {res.settings['steps']} steps (both censored: 0); margin {MARGIN_SPEED:.0%}; "
                  "partly also when it holds at some depths only",
        measurement="; ".join(f"L={L}: {_fmt_ci(st_)} ({v})" for L, (st_, v) in per.items()),
        verdict=claim_verdict(st, some_regimes=_some(per)), figure="fig-sst2-final",
        evidence="censored runs (residual / no residual / both) per depth: " + "; ".join(
            f"L={L} {c['residual']}/{c['no residual']}/{c['both']}" for L, c in e["censored"].items()), **st)
    if row["verdict"] == "inconclusive":
        row["reason"] = (f"{both} of {st['units']} pairs never reach the level" if both else
                         "the pairs disagree and the interval straddles 0")
    rows.append(row)
    return rows


def _shapes(s: dict) -> list[Shape]:
    out = [Shape(f"sst2 L={L}", _cfg(s, L, 1.0), s["n_train"], s["n_tokens"],
                 "per-token outputs (the sentence's target at every token)") for L in s["depths"]]
    w = s.get("wide")
    if w:
        out.append(Shape(f"sst2 wide FFN (L={w['L']}, m={w['m']})",
                         _cfg(s, w["L"], w["beta"], m=w["m"], activation=w["activation"], pool="mean"),
                         w["n_train"], s["n_tokens"], "the wide-FFN configuration, pooled readout"))
    return out


def _report(res: Result) -> dict:
    s, d, k = res.settings, res.data, res.summary()
    spread_rows = []
    for m in sorted(k["per_model"], key=lambda m: (m["L"], not m["residual"])):
        name = f"L = {m['L']}, " + ("residual" if m["residual"] else "no residual") + ", own step"
        for field, label, fmt in (("train_mse", "final training MSE", "{:.3f}"),
                                  ("train_error", "training error", "{:.1%}"),
                                  ("val_accuracy", "validation accuracy", "{:.1%}")):
            v = m[field]
            spread_rows.append({"configuration": name, "measurement": label, "median": v["median"],
                                "min": v["min"], "max": v["max"], "seeds": v["count"], "format": fmt})
    spread_rows.append({"configuration": "floor baseline (least squares)",
                        "measurement": "validation accuracy",
                        "median": k["baselines"]["ppmi"]["val_accuracy"], "min": None, "max": None,
                        "seeds": None, "format": "{:.1%}"})
    w = d.get("wide")
    deviations = [
        {"what": "SST-2 inputs", "paper": "not stated",
         "book": f"first {s['n_tokens']} tokens, no masks; frozen PPMI-SVD vectors, d = {s['d']}",
         "why": "keeps the theory's fixed-size X; no pretrained download"},
        {"what": "SST-2 readout", "paper": "not stated",
         "book": "the sentence's target at every token (per-token loss); prediction: the mean output",
         "why": "a mean-pooled loss cannot see a collapse of the rows within a sentence"},
        {"what": "SST-2 initialization", "paper": "Gaussian, 'proper'",
         "book": "residual: branch scale 1/sqrt(L); no residual: norm-preserving gains (LSUV)",
         "why": "with 1/sqrt(L) the deep stacks without residuals start with an output of about 1e-14"},
        {"what": "SST-2 step sizes", "paper": "not stated",
         "book": "each depth x residual at its own step, factor-2 grid, bracketed, chosen on probe seeds",
         "why": "depth and the residual change the stable step"}]
    if w:
        deviations.append({"what": "SST-2 wide FFN", "paper": "none",
                           "book": f"L = {w['L']}, m = {w['m']} on {w['N']} of the training sentences",
                           "why": "the FFN theorem needs m >= N; a subset keeps its cost small"})
    probes = sum(len(t["grid"]) for t in d["step_sizes"]) * len(s["probe_seeds"])
    return {
        "settings": {"book": f"N = {d['N']:,} training and {d['N_val']} GLUE validation sentences, first "
                             f"{s['n_tokens']} tokens; frozen PPMI-SVD vectors d = {s['d']}; m = {s['m']}, "
                             f"{s['activation']}; L in {s['depths']}; per-token loss; each arm at its own "
                             f"step (factor-2 grid from {s['eta_grid']}); {s['steps']} steps; "
                             f"{len(s['seeds'])} seeds; {s['dtype']}",
                     "why": "fixed length without masks keeps the theory's X; a per-token loss sees the "
                            "rows; every arm alive at initialization and at its own step"},
        "spread": spread_rows,
        "runs": len(d["runs"]) + probes + (len(w["runs"]) if w else 0) + len(d.get("float64_check") or []),
        "deviations": deviations,
    }


_WIDE = dict(n_train=256, m=1024, L=2, beta=1.0, activation="gelu", seeds=[0], steps=60, record_every=20,
             power_iters=5, safety=2.0, dtype="float64")
_SST2 = dict(n_tokens=10, n_val=None, embedding="ppmi", vocab_size=5000, emb_seed=0, d=16, d_qk=16, m=16,
             activation="gelu", betas=[0.0, 1.0], init_no_residual="norm_preserving",
             eta_grid=[0.03125, 0.0625, 0.125, 0.25], extend=6, probe_seeds=[100, 101], eval_every=10,
             check_steps=30, dtype="float32")

EXPERIMENT = Experiment(
    "sst2", "SST-2: depth L = 2, 6, 10 with and without residual connections, GLUE validation accuracy",
    "book/sst2.md",
    {"book": dict(_SST2, n_train=512, depths=[2, 6, 10], seeds=[0, 1, 2, 3, 4], probe_steps=50, steps=200,
                  wide=_WIDE),
     "paper": dict(_SST2, n_train=8192, depths=[2, 6, 10], seeds=list(range(10)), probe_steps=250, steps=1000,
                   wide=dict(_WIDE, n_train=1024, m=2048, steps=200)),
     "smoke": dict(_SST2, n_train=16, depths=[1, 2], seeds=[0, 1], probe_seeds=[100], eta_grid=[0.1, 0.2],
                   extend=2, probe_steps=3, steps=10, eval_every=5, check_steps=3, vocab_size=300,
                   wide=dict(_WIDE, n_train=8, m=16, L=1, steps=5, record_every=5, power_iters=3))},
    _run_sst2, _sst2_numbers, _sst2_claims, plot_sst2, shapes=_shapes, report=_report, piece_seeds=1,
    paper="SST-2, L = 2, 6, 10 with and without residuals; subset, embeddings, steps not stated")
