"""The theory's computable quantities: the book's linear-convergence theorem, checked numerically.

Book chapters: *Assumptions* (``book/assumptions.md``), *The theorem* (``book/theorem.md``) and
*Multi-layer* (``book/multilayer.md``). Paper: arXiv:2506.05249 (main theorem: under proper
initialization ``Phi(theta_{t+1}) <= (1 - mu alpha) Phi(theta_t)``). The constants below are the
**book's own** (the paper's are not available to this project).

Notation (book, chapter *The theorem*): the stacked matrices ``Z`` (first block's attention output
with its residual) and ``H`` (last hidden matrix, the input of ``W_U``) have ``N n`` rows and ``d``
columns. ``sigma_Nn(H)`` is the ``N n``-th largest singular value of ``H`` (0 when ``N n > d``).

* PL lemma (thm-pl): ``||grad Phi||^2 >= ||grad_{W_U} Phi||_F^2 >= 2 sigma_Nn(H)^2 Phi``.
* Descent lemma (thm-descent): ``mu <= 1/L_Phi`` gives ``Phi(theta - mu g) <= Phi - mu/2 ||g||^2``.
* Together: ``Phi_{t+1} <= (1 - mu sigma_Nn(H_t)^2) Phi_t``; with ``alpha = (sigma_Nn(H_0)/2)^2``
  the uniform rate holds as long as ``sigma_Nn(H_t) >= sigma_Nn(H_0)/2``.
* Residual lemma (thm-residual): ``sigma_min(Z) >= beta sigma_min(X) - ||Attn(X)||_2`` (Weyl).
* Part (b)'s proper-initialization condition ``2 J_B sqrt(2 Phi_0) / alpha <= r <= r_sigma`` cannot
  be certified here, but it can be certified to *fail* (:func:`part_b_check`): a lower bound of the
  left side (``J_B >= J(theta_0)``) against an exact upper bound of ``r_sigma``
  (:func:`r_sigma_upper`).

The smoothness constant ``L_Phi`` is **estimated** (largest Hessian eigenvalue in absolute value,
by power iteration with Hessian-vector products, at the initialization and at sampled points near
it, times a safety factor); it is not a certified bound. The run then checks the descent-lemma
inequality it stands for at every step (:func:`verify_run`). Along a run, the measured
``Phi_{t+1} <= Phi_t - mu/2 ||g_t||^2`` and ``sigma_Nn(H_t) >= sigma_0/2`` with the PL lemma imply
the bound at step ``t`` whatever the true ``L_B`` is: that is what a run certifies.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np
import torch

from .data import synthetic_regression
from .gd import History, gradient_descent, loss_and_grad, stacked
from .model import (ModelConfig, activation, attention_matrix, attention_scale, forward_trace,
                    init_params, layer_params, loss, validate)

__all__ = [
    "SMOOTH_ACTIVATIONS", "ACTIVATION_GAIN", "FLOAT_TOL", "LOSS_FLOOR",
    "sigma_nn", "hidden_matrices", "rate_alpha", "grad_norm", "hessian_norm", "smoothness_estimate",
    "mu_max", "residual_lemma", "ffn_lemma", "collapse_counterexample", "r_sigma_upper",
    "part_b_check", "AssumptionCheck",
    "check_assumptions", "RunCheck", "verify_run", "theorem_instance", "theorem_run",
]

#: Activations with a Lipschitz derivative (the descent lemma needs ``Phi`` to be smooth).
SMOOTH_ACTIVATIONS = ("gelu", "tanh", "softplus")

#: ``sup_x |act(x)| / |x|``: the constant ``ell`` of the FFN lemma (``|act(x)| <= ell |x|``);
#: ``inf`` when ``act(0) != 0`` (the lemma then gives nothing).
ACTIVATION_GAIN = {"relu": 1.0, "gelu": 1.0, "tanh": 1.0, "softplus": math.inf}

#: Floating-point tolerance added to ``1 - mu alpha`` when counting violations of the bound.
FLOAT_TOL = 1e-9

#: Steps whose loss is below ``LOSS_FLOOR * Phi_0`` are not checked (float64 round-off dominates).
LOSS_FLOOR = 1e-20


def _check_cfg_params_data(params, X, Y, cfg):
    validate(params, X, Y, cfg)
    if cfg.pool is not None:
        raise ValueError(f"the theorem is stated per token (pool=None), got pool={cfg.pool!r}; "
                         "use ModelConfig(pool=None).")


def _check_positive(name, value, *, integer=False, allow_inf=False):
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not (value > 0) or \
            (not allow_inf and not math.isfinite(value)):
        kind = "a positive integer" if integer else "a positive finite number"
        raise ValueError(f"{name} must be {kind}, got {value!r}.")


def sigma_nn(M: torch.Tensor) -> float:
    """``sigma_{N n}`` of the stacked matrix of ``M`` (``(N, n, d)`` or already ``(N n, d)``).

    The ``N n``-th largest singular value: the smallest one of the ``N n x d`` matrix when
    ``N n <= d``, and 0 when ``N n > d`` (the matrix then has a non-trivial left null space and the
    PL lemma (thm-pl) gives nothing).
    """
    if not isinstance(M, torch.Tensor) or M.dim() not in (2, 3):
        raise ValueError(f"M must be a tensor of shape (N, n, d) or (N n, d), got {getattr(M, 'shape', M)!r}.")
    A = stacked(M.detach()) if M.dim() == 3 else M.detach()
    rows, cols = A.shape
    if rows > cols:
        return 0.0
    return float(torch.linalg.svdvals(A)[rows - 1])


def hidden_matrices(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig):
    """``(Z_1, H_1, ..., Z_L, H_L)`` of a forward pass, as two lists of stacked ``(N n, d)`` matrices."""
    tr = forward_trace(params, X, cfg)
    return [stacked(z.detach()) for z in tr.Z], [stacked(h.detach()) for h in tr.H]


def rate_alpha(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig) -> float:
    """The theorem's rate ``alpha = (sigma_Nn(H_0) / 2)^2`` (eq. (thm-alpha))."""
    validate(params, X, None, cfg)
    return (sigma_nn(hidden_matrices(params, X, cfg)[1][-1]) / 2) ** 2


def _flat_norm(tensors) -> float:
    return math.sqrt(sum(float(t.pow(2).sum()) for t in tensors))


def grad_norm(params, X, Y, cfg) -> tuple[float, float, float]:
    """``(Phi, ||grad Phi||, ||grad_{W_U} Phi||_F)`` at ``params``."""
    phi, grads, _, _ = loss_and_grad(params, X, Y, cfg)
    return float(phi), _flat_norm(grads.values()), float(grads["W_U"].norm())


def hessian_norm(params, X, Y, cfg, *, iters: int = 20, seed: int = 0) -> float:
    """Estimate ``||nabla^2 Phi(theta)||_2`` (the largest absolute value of an eigenvalue) by power iteration.

    Each iteration is one exact Hessian-vector product (double backward through the gradient graph,
    built once). Power iteration approaches the top eigenvalue from below, so this is an
    *estimate*, not a bound.
    """
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be a positive integer, got {iters!r}.")
    names = list(params)
    theta = tuple(params[k].detach().requires_grad_(True) for k in names)
    with torch.enable_grad():
        grads = torch.autograd.grad(loss(dict(zip(names, theta)), X, Y, cfg), theta, create_graph=True)

    def hvp(v):
        with torch.enable_grad():
            return torch.autograd.grad(grads, theta, grad_outputs=v, retain_graph=True)

    gen = torch.Generator().manual_seed(seed)
    v = tuple(torch.randn(w.shape, generator=gen, dtype=w.dtype) for w in theta)
    nv = _flat_norm(v)
    v = tuple(t / nv for t in v)
    lam = 0.0
    for _ in range(iters):
        hv = hvp(v)
        lam = _flat_norm(hv)
        if lam == 0.0:
            return 0.0
        v = tuple(t / lam for t in hv)
    return lam


def smoothness_estimate(params, X, Y, cfg, *, radius: float | None = None, samples: int = 1,
                        iters: int = 20, seed: int = 0) -> dict:
    """Estimate a smoothness constant ``L_Phi`` of ``Phi`` near ``params`` (book: *The theorem*).

    Takes the largest Hessian-norm estimate (:func:`hessian_norm`) at ``params`` and at ``samples``
    points at distance ``radius`` in random directions (``radius`` defaults to 10% of
    ``||theta||``). Returns ``{"L_hat", "at_init", "samples", "radius"}``. An estimate: the run
    checks the descent-lemma inequality it is used for.
    """
    _check_cfg_params_data(params, X, Y, cfg)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise ValueError(f"samples must be a non-negative integer, got {samples!r}.")
    if radius is None:
        radius = 0.1 * _flat_norm(params.values())
    if not (isinstance(radius, (int, float)) and math.isfinite(radius) and radius >= 0):
        raise ValueError(f"radius must be a finite number >= 0, got {radius!r}.")
    at_init = hessian_norm(params, X, Y, cfg, iters=iters, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    sampled = []
    for _ in range(samples):
        u = {k: torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in params.items()}
        nu = _flat_norm(u.values())
        q = {k: params[k] + radius * u[k] / nu for k in params}
        sampled.append(hessian_norm(q, X, Y, cfg, iters=iters, seed=seed))
    return {"L_hat": max([at_init] + sampled), "at_init": at_init, "samples": sampled,
            "radius": float(radius)}


def mu_max(params, X, Y, cfg, *, safety: float = 2.0, **kwargs) -> float:
    """The theorem's largest step size ``mu_max = 1 / (safety * L_hat)`` (eq. (thm-mu)).

    ``L_hat`` is :func:`smoothness_estimate`; the factor ``safety`` (default 2) absorbs the error of
    the estimate and the change of the Hessian along the run.
    """
    if not (isinstance(safety, (int, float)) and safety >= 1):
        raise ValueError(f"safety must be a number >= 1, got {safety!r}.")
    return 1.0 / (safety * smoothness_estimate(params, X, Y, cfg, **kwargs)["L_hat"])


def residual_lemma(params, X, cfg, *, layer: int = 1) -> dict:
    """Both sides of the residual lemma (thm-residual) for block ``layer``'s input.

    With ``A = Attn(X_in)`` stacked and ``Z = A + beta_attn X_in``::

        sigma_Nn(Z) >= beta sigma_Nn(X_in) - ||A||_2 >= beta sigma_Nn(X_in) - sqrt(n) ||X_in||_2 ||W_V||_2

    The last bound uses ``||S_i||_2 <= sqrt(n)`` for a row-stochastic ``n x n`` matrix. Returns the
    three numbers ``sigma_Z``, ``weyl`` (middle) and ``crude`` (right), and ``sigma_X``, ``attn_norm``.
    """
    validate(params, X, None, cfg)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= cfg.L:
        raise ValueError(f"layer must be an integer in 1..{cfg.L}, got {layer!r}.")
    tr = forward_trace(params, X, cfg)
    X_in = X if layer == 1 else tr.H[layer - 2]
    W = layer_params(params, layer)
    S = attention_matrix(X_in, W["W_Q"], W["W_K"], attention_scale(cfg))
    A = stacked((S @ X_in @ W["W_V"]).detach())
    Xs = stacked(X_in.detach())
    n = X.shape[1]
    beta = cfg.b_attn
    sigma_X = sigma_nn(Xs)
    attn_norm = float(torch.linalg.matrix_norm(A, ord=2))
    crude_norm = math.sqrt(n) * float(torch.linalg.matrix_norm(Xs, ord=2)) * \
        float(torch.linalg.matrix_norm(W["W_V"], ord=2))
    return {"sigma_Z": sigma_nn(stacked(tr.Z[layer - 1])), "sigma_X": sigma_X, "attn_norm": attn_norm,
            "weyl": beta * sigma_X - attn_norm, "crude": beta * sigma_X - crude_norm}


def ffn_lemma(params, X, cfg, *, layer: int = 1) -> dict:
    """Both sides of the FFN lemma (thm-ffn): ``H = FFN(Z) + beta Z`` gives::

        sigma_Nn(H) >= beta sigma_Nn(Z) - ||FFN(Z)||_2 >= beta sigma_Nn(Z) - ell ||Z W_1||_F ||W_2||_2

    with ``ell = ACTIVATION_GAIN[activation]``. Returns ``sigma_H``, ``weyl``, ``crude``.
    """
    validate(params, X, None, cfg)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer <= cfg.L:
        raise ValueError(f"layer must be an integer in 1..{cfg.L}, got {layer!r}.")
    tr = forward_trace(params, X, cfg)
    W = layer_params(params, layer)
    Z = stacked(tr.Z[layer - 1].detach())
    H = stacked(tr.H[layer - 1].detach())
    beta = cfg.b_ffn
    ffn_norm = float(torch.linalg.matrix_norm(H - beta * Z, ord=2))
    ell = ACTIVATION_GAIN[cfg.activation]
    crude_norm = ell * float(torch.linalg.matrix_norm(Z @ W["W_1"])) * \
        float(torch.linalg.matrix_norm(W["W_2"], ord=2))
    sZ = sigma_nn(Z)
    return {"sigma_H": sigma_nn(H), "sigma_Z": sZ, "ffn_norm": ffn_norm,
            "weyl": beta * sZ - ffn_norm, "crude": beta * sZ - crude_norm}


def collapse_counterexample(n: int = 4, d: int = 8, *, sharpness: float = 50.0, beta: float = 1.0):
    """The counterexample to "Z is full rank whenever X is": ``W_V = -I`` and ``S ~ I``.

    ``X`` has orthonormal rows (``n <= d``) and ``W_Q = W_K = sqrt(sharpness) I`` with attention
    scale 1, so the logits are ``sharpness * X X^T = sharpness * I``, ``S = I + O(n e^{-sharpness})``
    and ``Z = S X W_V + beta X = (beta - 1) X + O(e^{-sharpness})``: with ``beta = 1`` the attention
    output cancels the residual. Returns ``(params, X, cfg)`` for one sequence (``N = 1``).
    """
    if isinstance(n, bool) or isinstance(d, bool) or not (isinstance(n, int) and isinstance(d, int)
                                                          and 1 <= n <= d):
        raise ValueError(f"need integers 1 <= n <= d, got n={n!r}, d={d!r}.")
    _check_positive("sharpness", sharpness)
    cfg = ModelConfig(d=d, d_qk=d, m=d, c=1, beta=beta, scale=1.0, activation="gelu")
    gen = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(d, n, generator=gen, dtype=torch.float64))
    X = Q.T.unsqueeze(0)  # (1, n, d), orthonormal rows
    eye = torch.eye(d, dtype=torch.float64)
    params = init_params(cfg, seed=0)
    params["layer1.W_Q"] = math.sqrt(sharpness) * eye
    params["layer1.W_K"] = math.sqrt(sharpness) * eye
    params["layer1.W_V"] = -eye
    return params, X, cfg


def r_sigma_upper(params, X, cfg) -> float:
    """An exact upper bound of ``r_sigma`` (eq. (thm-alpha)), from one explicit direction.

    Let ``H_0 = A W_2 + beta_ffn Z`` be the last hidden matrix at ``params`` with
    ``A = act(Z W_1)`` (last block), and ``(u, sigma_0, v)`` its ``N n``-th singular triple. If
    ``u`` lies in the range of ``A``, replacing ``W_2`` by ``W_2 - c A^+ u v^T`` changes nothing
    but ``H``, which becomes ``H_0 - c u v^T``, with ``sigma_Nn = sigma_0 - c`` for
    ``0 <= c <= sigma_0``. For ``c > sigma_0/2`` this point, at distance ``c ||A^+ u||``, has
    ``sigma_Nn(H) < sigma_0/2``, hence ``r_sigma <= (sigma_0/2) ||A^+ u||``. Returns that number
    (``inf`` when ``u`` is not in the range of ``A`` or ``sigma_0 = 0``). Book: *The theorem*,
    part (b) on the book's instances.
    """
    validate(params, X, None, cfg)
    tr = forward_trace(params, X, cfg)
    H = stacked(tr.H[-1].detach())
    rows, cols = H.shape
    if rows > cols:
        return math.inf
    U, S, _ = torch.linalg.svd(H, full_matrices=False)
    sigma0, u = float(S[rows - 1]), U[:, rows - 1]
    if sigma0 == 0.0:
        return math.inf
    W = layer_params(params, cfg.L)
    A = activation(cfg.activation)(stacked(tr.Z[-1].detach()) @ W["W_1"])
    w = torch.linalg.pinv(A) @ u  # the least-norm solution of A w = u
    if float((A @ w - u).norm()) > 1e-8:
        return math.inf
    return sigma0 / 2 * float(w.norm())


def part_b_check(params, X, Y, cfg) -> dict:
    """Can part (b) of the book's theorem (eq. (thm-init)) apply to this instance?

    Part (b) needs ``2 J_B sqrt(2 Phi_0) / alpha <= r <= r_sigma``. Since ``theta_0`` is in ``B``,
    ``J_B >= J_0 := ||grad Phi(theta_0)|| / sqrt(2 Phi_0)``, so the left side is at least
    ``radius_lower = 2 J_0 sqrt(2 Phi_0) / alpha``; and ``r_sigma <= r_sigma_upper``
    (:func:`r_sigma_upper`). When ``radius_lower > r_sigma_upper`` no radius ``r`` satisfies the
    condition: ``fails`` is then ``True``, a certificate (up to float64). ``fails = False`` does
    **not** certify the condition (``J_B`` and ``r_sigma`` are not computed).
    Returns ``{"J0", "radius_lower", "r_sigma_upper", "fails"}``.
    """
    _check_cfg_params_data(params, X, Y, cfg)
    phi, grads, _, H = loss_and_grad(params, X, Y, cfg)
    phi = float(phi)
    alpha = (sigma_nn(H) / 2) ** 2
    if phi == 0.0 or alpha == 0.0:
        return {"J0": float("nan"), "radius_lower": math.inf if alpha == 0.0 else 0.0,
                "r_sigma_upper": r_sigma_upper(params, X, cfg), "fails": alpha == 0.0}
    J0 = _flat_norm(grads.values()) / math.sqrt(2 * phi)
    lower = 2 * J0 * math.sqrt(2 * phi) / alpha
    upper = r_sigma_upper(params, X, cfg)
    return {"J0": J0, "radius_lower": lower, "r_sigma_upper": upper, "fails": lower > upper}


@dataclasses.dataclass
class AssumptionCheck:
    """One assumption evaluated on an instance: ``holds`` iff ``value`` meets ``threshold``."""

    name: str
    statement: str
    value: float
    threshold: float
    holds: bool

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def check_assumptions(params, X, Y, cfg, *, mu: float | None = None, steps: int | None = None,
                      min_decrease: float = 0.9) -> list[AssumptionCheck]:
    """Evaluate the book's assumptions (chapter *Assumptions*) on one instance.

    * ``width``: ``N n <= d`` (value ``N n``, threshold ``d``).
    * ``smooth activation``: the activation has a Lipschitz derivative (value 1 if so).
    * ``full-rank input``: ``sigma_Nn(X) > 0`` (relative to ``||X||_2``, threshold ``1e-10``).
    * ``non-degenerate H_0``: ``sigma_Nn(H_0) / ||H_0||_2 > 1e-10`` (no rank collapse at init).
    * ``non-vacuous rate`` (only with ``mu`` and ``steps``): the guaranteed factor
      ``(1 - mu alpha)^T`` is at most ``min_decrease`` (default 0.9: the theorem promises at least
      a 10% decrease over the ``T`` steps); we check ``mu alpha T >= ln(1/min_decrease)``, which
      implies it. The theorem stays true without this one; it only says nothing useful.
    """
    _check_cfg_params_data(params, X, Y, cfg)
    if (mu is None) != (steps is None):
        raise ValueError(f"give both mu and steps (for the non-vacuous-rate check) or neither, got "
                         f"mu={mu!r}, steps={steps!r}.")
    if mu is not None:
        _check_positive("mu", mu)
        _check_positive("steps", steps, integer=True)
    if isinstance(min_decrease, bool) or not isinstance(min_decrease, (int, float)) or \
            not 0 < min_decrease < 1:
        raise ValueError(f"min_decrease must be a number in (0, 1), got {min_decrease!r}.")
    N, n = X.shape[0], X.shape[1]
    Xs = stacked(X)
    _, Hs = hidden_matrices(params, X, cfg)
    H0 = Hs[-1]
    checks = [
        AssumptionCheck("width", "N n <= d", float(N * n), float(cfg.d), N * n <= cfg.d),
        AssumptionCheck("smooth activation", "act' is Lipschitz (gelu, tanh, softplus)",
                        float(cfg.activation in SMOOTH_ACTIVATIONS), 1.0,
                        cfg.activation in SMOOTH_ACTIVATIONS),
    ]
    rel_x = sigma_nn(Xs) / max(float(torch.linalg.matrix_norm(Xs, ord=2)), 1e-300)
    checks.append(AssumptionCheck("full-rank input", "sigma_Nn(X) / ||X||_2 > 1e-10", rel_x, 1e-10,
                                  rel_x > 1e-10))
    rel_h = sigma_nn(H0) / max(float(torch.linalg.matrix_norm(H0, ord=2)), 1e-300)
    checks.append(AssumptionCheck("non-degenerate H_0", "sigma_Nn(H_0) / ||H_0||_2 > 1e-10", rel_h,
                                  1e-10, rel_h > 1e-10))
    if mu is not None and steps is not None:
        alpha = (sigma_nn(H0) / 2) ** 2
        need = -math.log(min_decrease)
        val = mu * alpha * steps
        checks.append(AssumptionCheck("non-vacuous rate", f"mu alpha T >= ln(1/{min_decrease:g})",
                                      val, need, val >= need))
    return checks


@dataclasses.dataclass
class RunCheck:
    """Every inequality of the proof, checked at every step of one run (book: *The theorem*).

    Arrays over ``t = 0 .. T-1`` (steps whose loss is above ``LOSS_FLOOR * Phi_0``):
    ``excess = Phi_{t+1}/Phi_t - (1 - mu alpha)``; ``pl_margin = ||grad_{W_U}||^2 / (2 Phi_t) -
    sigma_Nn(H_t)^2`` (PL lemma, >= 0); ``descent_margin = Phi_t - mu (1 - L mu/2) ||g_t||^2 -
    Phi_{t+1}`` (descent lemma with the estimated ``L``, >= 0); ``half_margin = Phi_t -
    (mu/2) ||g_t||^2 - Phi_{t+1}`` (the form the proof uses, >= 0); ``sigma_ratio =
    sigma_Nn(H_t) / sigma_Nn(H_0)`` (>= 1/2 for the uniform rate). ``certified`` counts the steps
    with ``half_margin >= 0`` and ``sigma_ratio >= 1/2``: at those, the PL lemma alone implies
    ``Phi_{t+1} <= (1 - mu alpha) Phi_t``, whatever the true smoothness constant is.
    ``max_distance = max_t ||theta_t - theta_0||`` (``nan`` when not given).
    """

    excess: np.ndarray
    pl_margin: np.ndarray
    descent_margin: np.ndarray
    sigma_ratio: np.ndarray
    violations: int
    max_excess: float
    checked_steps: int
    half_margin: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    certified: int = 0
    max_distance: float = float("nan")


def verify_run(hist: History, grad_U: np.ndarray, sigma_H: np.ndarray, mu: float, alpha: float,
               L_hat: float, distance: np.ndarray | None = None) -> RunCheck:
    """Check the theorem's inequalities along a run (see :class:`RunCheck`).

    ``grad_U[t] = ||grad_{W_U} Phi(theta_t)||_F`` and ``sigma_H[t] = sigma_Nn(H_t)`` for every
    step ``t = 0 .. T``; :func:`theorem_run` records both (and ``distance[t] = ||theta_t -
    theta_0||``, optional). A step counts as a violation when
    ``Phi_{t+1}/Phi_t > 1 - mu alpha + FLOAT_TOL``.
    """
    loss_ = np.asarray(hist.loss, dtype=np.float64)
    T = len(loss_) - 1
    grad_U = np.asarray(grad_U, dtype=np.float64)
    sigma_H = np.asarray(sigma_H, dtype=np.float64)
    if len(grad_U) != T + 1 or len(sigma_H) != T + 1:
        raise ValueError(f"grad_U and sigma_H need one value per iterate ({T + 1}), got "
                         f"{len(grad_U)} and {len(sigma_H)}.")
    keep = loss_[:-1] > LOSS_FLOOR * loss_[0] if T > 0 else np.zeros(0, dtype=bool)
    g = np.asarray(hist.grad_norm, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = loss_[1:] / loss_[:-1]
        pl = (grad_U ** 2 / (2 * loss_) - sigma_H ** 2)[:-1][keep]
    excess = (ratio - (1 - mu * alpha))[keep]
    descent = (loss_[:-1] - mu * (1 - L_hat * mu / 2) * g[:-1] ** 2 - loss_[1:])[keep]
    half = (loss_[:-1] - mu / 2 * g[:-1] ** 2 - loss_[1:])[keep]
    sr = (sigma_H / sigma_H[0])[:-1][keep] if sigma_H[0] > 0 else np.zeros(int(keep.sum()))
    tol = FLOAT_TOL * loss_[:-1][keep]  # round-off of the loss values themselves
    if distance is not None and len(distance) != T + 1:
        raise ValueError(f"distance needs one value per iterate ({T + 1}), got {len(distance)}.")
    return RunCheck(excess=excess, pl_margin=pl, descent_margin=descent, sigma_ratio=sr,
                    violations=int((excess > FLOAT_TOL).sum()),
                    max_excess=float(excess.max()) if len(excess) else float("nan"),
                    checked_steps=int(keep.sum()), half_margin=half,
                    certified=int(((half >= -tol) & (sr >= 0.5)).sum()),
                    max_distance=float(np.max(distance)) if distance is not None else float("nan"))


def theorem_instance(seed: int = 0, *, beta: float = 1.0, layers: int = 1, N: int = 2, n: int = 4,
                     d: int = 16, activation: str = "gelu", scale: str | float = "1/sqrt(d_qk)",
                     d_qk: int | None = None):
    """The book's verification instance: ``(params, X, Y, cfg)`` from one seed.

    Synthetic Gaussian data (:func:`convres.synthetic_regression`, seed ``seed``), Gaussian weights
    (:func:`convres.init_params`, seed ``seed + 1``), FFN width ``m = d``, one output (``c = 1``).
    """
    cfg = ModelConfig(d=d, d_qk=d if d_qk is None else d_qk, m=d, c=1, L=layers, beta=beta,
                      activation=activation, scale=scale)
    X, Y = synthetic_regression(N, n, d, 1, seed=seed)
    return init_params(cfg, seed=seed + 1), X, Y, cfg


def theorem_run(params, X, Y, cfg, *, steps: int = 300, mu: float | None = None, safety: float = 2.0,
                smoothness_samples: int = 1, seed: int = 0) -> dict:
    """Run gradient descent with the theorem's step and check the theorem at every step.

    ``mu`` defaults to :func:`mu_max`. Returns a dict with the CLI's fields (``alpha``, ``mu``,
    ``mu_max``, ``sigma_min_Z0``, ``sigma_max_Z0``, ``assumptions_hold``, ``max_excess``,
    ``violations``, ``initial_loss``, ``final_loss``, ``steps``, ``sigma_min_H0``,
    ``mu_max_is_estimate``, ``part_b_holds``) plus ``assumptions`` (the table), ``L_hat``,
    ``history`` (the :class:`History`), ``check`` (the :class:`RunCheck`), ``params_final`` (the
    last iterate) and ``part_b`` (:func:`part_b_check` at ``theta_0``).

    ``assumptions_hold`` is ``True`` iff every check of :func:`check_assumptions` holds: (A0)-(A4)
    of the chapter *Assumptions*, i.e. those of part (a) and the non-vacuous rate; it says nothing
    about part (b). ``part_b_holds`` is ``False`` when :func:`part_b_check` certifies that part
    (b)'s condition (A5) fails and ``None`` (unknown) otherwise: it is never ``True``, since ``J_B``
    and ``r_sigma`` are not computed. ``sigma_min_H0 = sigma_Nn(H_0)``, so ``alpha =
    (sigma_min_H0 / 2)^2``. ``mu_max = 1 / (safety * L_hat)`` with ``L_hat`` estimated from
    sampled Hessian-vector products (:func:`smoothness_estimate`), not a certified bound, hence
    ``mu_max_is_estimate = True``.
    """
    _check_cfg_params_data(params, X, Y, cfg)
    if isinstance(safety, bool) or not isinstance(safety, (int, float)) or not safety >= 1:
        raise ValueError(f"safety must be a number >= 1, got {safety!r}.")
    if mu is not None:
        _check_positive("mu", mu)
    est = smoothness_estimate(params, X, Y, cfg, samples=smoothness_samples, seed=seed)
    L_hat = est["L_hat"]
    m_max = 1.0 / (safety * L_hat)
    mu = m_max if mu is None else mu
    Zs, Hs = hidden_matrices(params, X, cfg)
    sigma_H0 = sigma_nn(Hs[-1])
    alpha = (sigma_H0 / 2) ** 2
    checks = check_assumptions(params, X, Y, cfg, mu=mu, steps=steps)
    grad_U, dist = [], []

    def record(t, theta, grads, HL):  # the quantities of the proof at every iterate theta_t
        grad_U.append(float(grads["W_U"].norm()))
        dist.append(_flat_norm(theta[k] - params[k] for k in theta))

    final, hist = gradient_descent(params, X, Y, cfg, mu, steps, record_every=1, callback=record)
    # sigma_Nn(H_t) at every step: the history's sigma_min(H_t) (record_every=1) when N n <= d
    wide = X.shape[0] * X.shape[1] <= cfg.d
    sig_H = list(hist.sigma_min_H) if wide else [0.0] * len(hist.sigma_min_H)
    chk = verify_run(hist, grad_U, sig_H, mu, alpha, L_hat, dist)
    sZ = torch.linalg.svdvals(Zs[0])
    part_b = part_b_check(params, X, Y, cfg)
    return {
        "alpha": alpha, "mu": mu, "mu_max": m_max,
        "sigma_min_Z0": sigma_nn(Zs[0]), "sigma_max_Z0": float(sZ[0]),
        "assumptions_hold": all(c.holds for c in checks),
        "max_excess": chk.max_excess, "violations": chk.violations,
        "initial_loss": float(hist.loss[0]), "final_loss": float(hist.loss[-1]), "steps": hist.steps,
        "sigma_min_H0": sigma_H0, "mu_max_is_estimate": True,
        "part_b_holds": False if part_b["fails"] else None,
        "L_hat": L_hat, "assumptions": [c.to_dict() for c in checks],
        "history": hist, "check": chk, "params_final": final,
        "part_b": part_b,
    }
