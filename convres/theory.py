"""The theory's computable quantities: the book's two theorems, checked numerically.

Book chapters: *Assumptions* (``book/assumptions.md``), *The theorem* (``book/theorem.md``) and
*Multi-layer* (``book/multilayer.md``). Paper: arXiv:2506.05249 (main theorem: under proper
initialization ``Phi(theta_{t+1}) <= (1 - mu alpha) Phi(theta_t)``). The constants below are the
**book's own** (the paper's are not available to this project).

Notation (book, chapter *The theorem*): the stacked matrices ``Z`` (first block's attention output
with its residual) and ``H`` (last hidden matrix, the input of ``W_U``) have ``N n`` rows and ``d``
columns; ``sigma_0 = sigma_Nn(H_0)`` (:func:`convres.rank.sigma_nn`, 0 when ``N n > d``).

Theorem ``thm-main`` (through ``W_U``):

* PL lemma: ``||grad Phi||^2 >= ||grad_{W_U} Phi||_F^2 >= 2 sigma_Nn(H)^2 Phi``.
* Descent lemma: ``mu <= 1/L_B`` gives ``Phi(theta - mu g) <= Phi - mu/2 ||g||^2``.
* (a) ``Phi_{t+1} <= (1 - mu sigma_Nn(H_t)^2) Phi_t``; with ``alpha = (sigma_0/2)^2``
  (:func:`alpha`) the uniform rate holds while ``sigma_Nn(H_t) >= sigma_0/2``.
* (b') if ``rho = 4 sqrt(2 Phi_0) / sigma_0 < r <= r_sigma`` the whole run stays within ``rho``
  of ``theta_0`` (path length). :func:`part_b_check` certifies that (b') *fails* when ``rho``
  exceeds the upper bound :func:`r_sigma_upper`; :mod:`convres.certify` certifies that it *holds*.

Theorem ``thm-ffn`` (through the last ``W_2``, per token or pooled): :func:`ffn_theorem_run`.
Which experiment meets which hypothesis: :func:`scope_table`.

The smoothness constant ``L_Phi`` is **estimated** here (:func:`smoothness_estimate`: the largest
Hessian eigenvalue in absolute value by power iteration with Hessian-vector products, at sampled
points), a lower estimate, not a bound; the rigorous upper bound is
:func:`convres.certify.smoothness_upper`. A run measures every inequality of the proof at every
step (:func:`verify_run`): what it establishes is *observed*, not certified before the run.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Mapping

import numpy as np
import torch

from .data import synthetic_regression
from .gd import History, Step, _loss_and_grad, gradient_descent
from .model import ModelConfig, _trace, check_inputs, init_params, layer_params
from .rank import singular_values, sigma_nn, stacked, weyl_lower_bounds

__all__ = [
    "FLOAT_TOL", "LOSS_FLOOR", "alpha", "rate_alpha", "hessian_norm", "smoothness_estimate",
    "mu_max", "residual_lemma", "ffn_lemma", "r_sigma_upper", "path_radius", "part_b_check",
    "AssumptionCheck",
    "check_assumptions", "RunCheck", "verify_run", "theorem_instance", "TheoremRun", "theorem_run",
    "alpha_ffn", "ffn_sigmas", "FFNTheoremRun", "ffn_theorem_run", "THEOREMS", "SCOPE_EXPERIMENTS", "parameter_count",
    "experiment_shapes", "scope_rows", "scope_table",
]

#: Floating-point tolerance added to ``1 - mu alpha`` when counting violations of the bound.
FLOAT_TOL = 1e-9

#: Steps whose loss is below ``LOSS_FLOOR * Phi_0`` are not checked (float64 round-off dominates).
LOSS_FLOOR = 1e-20


def _check_per_token(params, X, Y, cfg):
    check_inputs(params, X, Y, cfg)
    if cfg.pool is not None:
        raise ValueError(f"the theorem is stated per token (pool=None), got pool={cfg.pool!r}; "
                         "use ModelConfig(pool=None).")


def _positive(name, value, *, integer=False):
    ok = isinstance(value, numbers.Integral) if integer else isinstance(value, numbers.Real)
    if isinstance(value, bool) or not ok or not (value > 0) or not math.isfinite(value):
        raise ValueError(f"{name} must be {'a positive integer' if integer else 'a positive finite number'}, "
                         f"got {value!r}.")


def _flat_norm(tensors) -> float:
    return math.sqrt(sum(float(t.pow(2).sum()) for t in tensors))


def alpha(sigma_0: float) -> float:
    """The theorem's rate ``alpha = (sigma_0 / 2)^2`` (equation (thm-alpha)), the one place of
    the formula."""
    return (sigma_0 / 2) ** 2


def rate_alpha(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig) -> float:
    """``alpha`` of an instance: :func:`alpha` of ``sigma_Nn(H_0)``, ``H_0`` the last hidden matrix."""
    check_inputs(params, X, None, cfg)
    return alpha(sigma_nn(_trace(params, X, cfg).H[-1]))


def hessian_norm(params, X, Y, cfg, *, iters: int = 20, seed: int = 0) -> float:
    """Estimate ``||nabla^2 Phi(theta)||_2`` (the largest absolute value of an eigenvalue) by power
    iteration. Each iteration is one exact Hessian-vector product (``torch.func.jvp`` of
    ``torch.func.grad``). Power iteration approaches the top eigenvalue from below, so this is an
    *estimate*, not a bound."""
    _positive("iters", iters, integer=True)
    check_inputs(params, X, Y, cfg)
    return _hessian_norm(params, X, Y, cfg, iters, seed)


def _hessian_norm(params, X, Y, cfg, iters, seed) -> float:
    names = list(params)

    def grad_at(*ws):
        return torch.func.grad(lambda p: _phi(p, X, Y, cfg))(dict(zip(names, ws)))

    theta = tuple(params[k].detach() for k in names)
    gen = torch.Generator().manual_seed(seed)
    v = tuple(torch.randn(w.shape, generator=gen, dtype=w.dtype) for w in theta)
    lam = _flat_norm(v)
    v = tuple(t / lam for t in v)
    for _ in range(iters):
        hv = torch.func.jvp(grad_at, theta, v)[1]
        lam = _flat_norm(hv[k] for k in names)
        if not math.isfinite(lam):  # the product, or its norm, overflowed: no finite estimate
            return math.inf
        if lam == 0.0:
            return 0.0
        v = tuple(hv[k] / lam for k in names)
    return lam


def _phi(params, X, Y, cfg):
    return 0.5 * (_trace(params, X, cfg).F - Y).pow(2).sum()


def smoothness_estimate(params, X, Y, cfg, *, radius: float | None = None, samples: int = 1,
                        iters: int = 20, seed: int = 0) -> dict:
    """Estimate a smoothness constant ``L_Phi`` of ``Phi`` near ``params`` (book: *The theorem*).

    Takes the largest :func:`hessian_norm` at ``params`` and at ``samples`` points at distance
    ``radius`` in random directions (``radius`` defaults to 10% of ``||theta||``). Returns
    ``{"L_hat", "at_init", "samples", "radius"}``. An estimate: the run checks the descent-lemma
    inequality it is used for.
    """
    _check_per_token(params, X, Y, cfg)
    if not isinstance(samples, numbers.Integral) or isinstance(samples, bool) or samples < 0:
        raise ValueError(f"samples must be a non-negative integer, got {samples!r}.")
    _positive("iters", iters, integer=True)
    return _smoothness(params, X, Y, cfg, radius, samples, iters, seed)


def _smoothness(params, X, Y, cfg, radius, samples, iters, seed) -> dict:
    if radius is None:
        radius = 0.1 * _flat_norm(params.values())
    if not (isinstance(radius, numbers.Real) and math.isfinite(radius) and radius >= 0):
        raise ValueError(f"radius must be a finite number >= 0, got {radius!r}.")
    at_init = _hessian_norm(params, X, Y, cfg, iters, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    sampled = []
    for _ in range(samples):
        u = {k: torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in params.items()}
        nu = _flat_norm(u.values())
        sampled.append(_hessian_norm({k: params[k] + radius * u[k] / nu for k in params}, X, Y, cfg,
                                     iters, seed))
    L_hat = max([at_init] + sampled)
    if not math.isfinite(L_hat):
        raise ValueError("the Hessian of the loss is not finite at the initialization (overflow): "
                         "check the scale of beta and of the data.")
    return {"L_hat": L_hat, "at_init": at_init, "samples": sampled, "radius": float(radius)}


def mu_max(params, X, Y, cfg, *, safety: float = 2.0, **kwargs) -> float:
    """The theorem's largest step size ``mu_max = 1 / (safety * L_hat)`` (equation (thm-mu)).

    ``L_hat`` is :func:`smoothness_estimate`; the factor ``safety`` (default 2) absorbs the error of
    the estimate and the change of the Hessian along the run.
    """
    if not (isinstance(safety, numbers.Real) and not isinstance(safety, bool) and safety >= 1):
        raise ValueError(f"safety must be a number >= 1, got {safety!r}.")
    L_hat = smoothness_estimate(params, X, Y, cfg, **kwargs)["L_hat"]
    return math.inf if L_hat == 0 else 1.0 / (safety * L_hat)


def _layer(cfg, layer):
    if not isinstance(layer, numbers.Integral) or isinstance(layer, bool) or not 1 <= layer <= cfg.L:
        raise ValueError(f"layer must be an integer in 1..{cfg.L}, got {layer!r}.")


def residual_lemma(params, X, cfg, *, layer: int = 1) -> dict:
    """Both sides of the residual lemma (thm-residual) for block ``layer``'s input ``X_in``.

    With ``A = Attn(X_in)`` stacked and ``Z = A + beta_attn X_in``::

        sigma_Nn(Z) >= beta sigma_Nn(X_in) - ||A||_2 >= beta sigma_Nn(X_in) - sqrt(n) ||X_in||_2 ||W_V||_2

    The last bound uses ``||S_i||_2 <= sqrt(n)`` for a row-stochastic ``n x n`` matrix. Returns
    ``sigma_Z``, ``weyl`` (middle), ``crude`` (right), ``sigma_X`` and ``attn_norm``.
    """
    check_inputs(params, X, None, cfg)
    _layer(cfg, layer)
    tr = _trace(params, X, cfg)
    X_in = stacked(X if layer == 1 else tr.H[layer - 2])
    A = stacked(tr.A[layer - 1])
    beta = cfg.residual[0]
    W_V = layer_params(params, layer)["W_V"]
    attn_norm = float(singular_values(A)[0])
    crude_norm = math.sqrt(X.shape[1]) * float(singular_values(X_in)[0]) * float(singular_values(W_V)[0])
    sigma_X = sigma_nn(X_in)
    return {"sigma_Z": sigma_nn(tr.Z[layer - 1]), "sigma_X": sigma_X, "attn_norm": attn_norm,
            "weyl": float(weyl_lower_bounds(X_in, A, beta)[0]) if X_in.shape[0] <= X_in.shape[1]
            else beta * sigma_X - attn_norm,
            "crude": beta * sigma_X - crude_norm}


def ffn_lemma(params, X, cfg, *, layer: int = 1) -> dict:
    """Both sides of the FFN lemma (thm-ffn): ``H = FFN(Z) + beta Z`` gives::

        sigma_Nn(H) >= beta sigma_Nn(Z) - ||FFN(Z)||_2 >= beta sigma_Nn(Z) - gain ||Z W_1||_F ||W_2||_2

    with ``gain = cfg.act.gain``. Returns ``sigma_H``, ``sigma_Z``, ``ffn_norm``, ``weyl``, ``crude``.
    """
    check_inputs(params, X, None, cfg)
    _layer(cfg, layer)
    tr = _trace(params, X, cfg)
    W = layer_params(params, layer)
    Z, H = stacked(tr.Z[layer - 1]).detach(), stacked(tr.H[layer - 1]).detach()
    beta = cfg.residual[1]
    ffn_norm = float(singular_values(H - beta * Z)[0])
    crude_norm = cfg.act.gain * float(torch.linalg.matrix_norm(Z @ W["W_1"])) * float(singular_values(W["W_2"])[0])
    sZ = sigma_nn(Z)
    return {"sigma_H": sigma_nn(H), "sigma_Z": sZ, "ffn_norm": ffn_norm,
            "weyl": beta * sZ - ffn_norm, "crude": beta * sZ - crude_norm}


def r_sigma_upper(params, X, cfg) -> float:
    """An exact upper bound of ``r_sigma`` (equation (thm-alpha)), from one explicit direction.

    Let ``H_0 = A W_2 + beta_ffn Z`` be the last hidden matrix at ``params`` with
    ``A = act(Z W_1)`` (last block), and ``(u, sigma_0, v)`` its ``N n``-th singular triple. If
    ``u`` lies in the range of ``A``, replacing ``W_2`` by ``W_2 - c A^+ u v^T`` changes nothing
    but ``H``, which becomes ``H_0 - c u v^T``, with ``sigma_Nn = sigma_0 - c`` for
    ``0 <= c <= sigma_0``. For ``c > sigma_0/2`` this point, at distance ``c ||A^+ u||``, has
    ``sigma_Nn(H) < sigma_0/2``, hence ``r_sigma <= (sigma_0/2) ||A^+ u||``. Returns that number
    (``inf`` when ``u`` is not in the range of ``A`` or ``sigma_0 = 0``).
    """
    check_inputs(params, X, None, cfg)
    return _r_sigma_upper(params, X, cfg)


def _r_sigma_upper(params, X, cfg) -> float:
    tr = _trace(params, X, cfg)
    H = stacked(tr.H[-1]).detach()
    rows, cols = H.shape
    if rows > cols:
        return math.inf
    singular_values(H, "H_0")  # a named error if H_0 is not finite
    U, S, _ = torch.linalg.svd(H, full_matrices=False)
    sigma0, u = float(S[rows - 1]), U[:, rows - 1]
    if sigma0 == 0.0:
        return math.inf
    A = cfg.act(stacked(tr.Z[-1]).detach() @ layer_params(params, cfg.L)["W_1"])
    w = torch.linalg.pinv(A) @ u  # the least-norm solution of A w = u
    if float((A @ w - u).norm()) > 1e-8:
        return math.inf
    return sigma0 / 2 * float(w.norm())


def path_radius(phi_0: float, sigma_0: float) -> float:
    """``rho = 4 sqrt(2 Phi_0) / sigma_0``: the left side of part (b') of ``thm-main``, a bound on
    the path length (hence on ``||theta_t - theta_0||``) of the whole run (``inf`` when
    ``sigma_0 = 0``)."""
    return 4 * math.sqrt(2 * phi_0) / sigma_0 if sigma_0 > 0 else math.inf


def part_b_check(params, X, Y, cfg) -> dict:
    """Can part (b') of the book's theorem apply to this instance?

    Part (b') needs a radius ``r`` with ``rho := 4 sqrt(2 Phi_0) / sigma_0 < r <= r_sigma`` (and
    ``mu <= 1/L_B`` on that ball). ``rho`` is computed exactly and ``r_sigma <= r_sigma_upper``
    (:func:`r_sigma_upper`): if ``rho >= r_sigma_upper`` no admissible ``r`` exists, and
    ``fails = True`` is a certificate of failure (up to float64). ``holds = True`` is a
    certificate that it applies, from :func:`convres.certify.certificate` (one block, smooth
    activation): ``rho < r_sigma_lower``; ``None`` when neither is decided.

    Also returned, for the remark on the older condition (A5) of the book's first version
    (``2 J_B sqrt(2 Phi_0) / alpha <= r``): ``J0 = ||grad Phi_0|| / sqrt(2 Phi_0) <= J_B`` and
    ``radius_lower_A5 = 2 J0 sqrt(2 Phi_0) / alpha``, a lower bound of its left side.
    Returns ``{"rho", "r_sigma_upper", "r_sigma_lower", "fails", "holds", "J0", "radius_lower_A5"}``.
    """
    _check_per_token(params, X, Y, cfg)
    return _part_b(params, X, Y, cfg)


def _part_b(params, X, Y, cfg) -> dict:
    phi, grads, tr = _loss_and_grad(params, X, Y, cfg, None)
    phi, sigma_0 = float(phi), sigma_nn(tr.H[-1].detach())
    a = alpha(sigma_0)
    upper = _r_sigma_upper(params, X, cfg)
    rho = path_radius(phi, sigma_0)
    lower, holds = None, None
    if cfg.L == 1 and cfg.act.smooth and params["W_U"].dim() == 2 and sigma_0 > 0:
        from .certify import _centre, _r_sigma_lower
        lower = _r_sigma_lower(_centre(params, X, Y, cfg))
        holds = True if rho < lower else None
    J0 = _flat_norm(grads.values()) / math.sqrt(2 * phi) if phi > 0 else float("nan")
    lower_a5 = 2 * J0 * math.sqrt(2 * phi) / a if phi > 0 and a > 0 else math.inf
    fails = bool(sigma_0 == 0.0 or rho >= upper)
    return {"rho": rho, "r_sigma_upper": upper, "r_sigma_lower": lower, "fails": fails,
            "holds": holds, "J0": J0, "radius_lower_A5": lower_a5}


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
    * ``non-vacuous rate`` (only with ``mu`` and ``steps``): ``mu alpha T >= ln(1/min_decrease)``,
      which implies that the guaranteed factor ``(1 - mu alpha)^T`` is at most ``min_decrease``.
    """
    _check_per_token(params, X, Y, cfg)
    if (mu is None) != (steps is None):
        raise ValueError(f"give both mu and steps (for the non-vacuous-rate check) or neither, got "
                         f"mu={mu!r}, steps={steps!r}.")
    if mu is not None:
        _positive("mu", mu)
        _positive("steps", steps, integer=True)
    if not isinstance(min_decrease, numbers.Real) or isinstance(min_decrease, bool) or not 0 < min_decrease < 1:
        raise ValueError(f"min_decrease must be a number in (0, 1), got {min_decrease!r}.")
    return _assumptions(params, X, cfg, mu, steps, min_decrease)


def _assumptions(params, X, cfg, mu, steps, min_decrease) -> list[AssumptionCheck]:
    N, n = X.shape[0], X.shape[1]
    Xs, H0 = stacked(X), stacked(_trace(params, X, cfg).H[-1]).detach()
    smooth = cfg.act.smooth
    A = AssumptionCheck
    checks = [A("width", "N n <= d", float(N * n), float(cfg.d), N * n <= cfg.d),
              A("smooth activation", "act' is Lipschitz (gelu, tanh, softplus)",
                float(smooth), 1.0, smooth)]
    rel_x = sigma_nn(Xs) / max(float(singular_values(Xs)[0]), 1e-300)
    checks.append(A("full-rank input", "sigma_Nn(X) / ||X||_2 > 1e-10",
                    rel_x, 1e-10, rel_x > 1e-10))
    sigma_0 = sigma_nn(H0)
    rel_h = sigma_0 / max(float(singular_values(H0, "H_0")[0]), 1e-300)
    checks.append(A("non-degenerate H_0", "sigma_Nn(H_0) / ||H_0||_2 > 1e-10",
                    rel_h, 1e-10, rel_h > 1e-10))
    if mu is not None:
        need, val = -math.log(min_decrease), mu * alpha(sigma_0) * steps
        checks.append(A("non-vacuous rate", f"mu alpha T >= ln(1/{min_decrease:g})",
                        val, need, val >= need))
    return checks


@dataclasses.dataclass
class RunCheck:
    """Every inequality of the proof, measured at every step of one run (book: *The theorem*).

    Arrays over ``t = 0 .. T-1`` (steps whose loss is above ``LOSS_FLOOR * Phi_0``):
    ``excess = Phi_{t+1}/Phi_t - (1 - mu alpha)``; ``pl_margin = ||grad_{W_U}||^2 / (2 Phi_t) -
    sigma_Nn(H_t)^2`` (PL lemma, >= 0); ``descent_margin = Phi_t - mu (1 - L mu/2) ||g_t||^2 -
    Phi_{t+1}`` (descent lemma with the estimated ``L``, >= 0); ``half_margin = Phi_t -
    (mu/2) ||g_t||^2 - Phi_{t+1}`` (the form the proof uses, >= 0); ``sigma_ratio =
    sigma_Nn(H_t) / sigma_Nn(H_0)`` (>= 1/2 for the uniform rate). ``observed`` counts the steps
    with ``half_margin >= 0`` and ``sigma_ratio >= 1/2``: at those, the PL lemma alone implies
    ``Phi_{t+1} <= (1 - mu alpha) Phi_t`` (an a-posteriori deduction, not a certificate).
    ``max_distance = max_t ||theta_t - theta_0||``.
    """

    excess: np.ndarray
    pl_margin: np.ndarray
    descent_margin: np.ndarray
    half_margin: np.ndarray
    sigma_ratio: np.ndarray
    violations: int
    max_excess: float
    checked_steps: int
    observed: int
    max_distance: float

    @property
    def every_step_observed(self) -> bool:
        """Every checked step satisfies the bound, the PL lemma, the descent inequality and the
        sigma condition, and at least one step was checked."""
        return (self.checked_steps > 0 and self.violations == 0 and self.observed == self.checked_steps
                and bool((self.pl_margin >= -1e-9).all()) and bool((self.descent_margin >= -1e-9).all()))


def verify_run(hist: History, grad_U, sigma_H, mu: float, a: float, L_hat: float, distance) -> RunCheck:
    """Measure the theorem's inequalities along a run (see :class:`RunCheck`).

    ``grad_U[t] = ||grad_{W_U} Phi(theta_t)||_F`` (``t = 0 .. T-1``), ``sigma_H[t] =
    sigma_Nn(H_t)`` and ``distance[t] = ||theta_t - theta_0||`` (``t = 0 .. T``);
    :func:`theorem_run` records them. A step counts as a violation when
    ``Phi_{t+1}/Phi_t > 1 - mu alpha + FLOAT_TOL``.
    """
    loss = np.asarray(hist.loss, dtype=np.float64)
    T = len(loss) - 1
    grad_U, sigma_H = np.asarray(grad_U, dtype=np.float64), np.asarray(sigma_H, dtype=np.float64)
    g = np.asarray(hist.grad_norm, dtype=np.float64)[:T]  # a diverged run has one more gradient
    if len(grad_U) != T or len(g) != T or len(sigma_H) != T + 1 or len(distance) != T + 1:
        raise ValueError(f"need one gradient per step ({T}) and sigma_H, distance per iterate ({T + 1}), got "
                         f"{len(grad_U)}, {len(g)}, {len(sigma_H)}, {len(distance)}.")
    keep = loss[:-1] > LOSS_FLOOR * loss[0] if T > 0 else np.zeros(0, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = loss[1:] / loss[:-1]
        pl = (grad_U ** 2 / (2 * loss[:-1]) - sigma_H[:-1] ** 2)[keep]
    excess = (ratio - (1 - mu * a))[keep]
    descent = (loss[:-1] - mu * (1 - L_hat * mu / 2) * g ** 2 - loss[1:])[keep]
    half = (loss[:-1] - mu / 2 * g ** 2 - loss[1:])[keep]
    sr = (sigma_H / sigma_H[0])[:-1][keep] if sigma_H[0] > 0 else np.zeros(int(keep.sum()))
    tol = FLOAT_TOL * loss[:-1][keep]  # round-off of the loss values themselves
    return RunCheck(excess=excess, pl_margin=pl, descent_margin=descent, half_margin=half, sigma_ratio=sr,
                    violations=int((excess > FLOAT_TOL).sum()),
                    max_excess=float(excess.max()) if len(excess) else float("nan"),
                    checked_steps=int(keep.sum()), observed=int(((half >= -tol) & (sr >= 0.5)).sum()),
                    max_distance=float(np.max(distance)))


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


@dataclasses.dataclass
class TheoremRun:
    """Gradient descent with the theorem's step size, every inequality measured at every step.

    Attributes:
        alpha: the rate ``(sigma_0/2)^2``; sigma_0: ``sigma_Nn(H_0)``.
        mu: the step size used; mu_max: ``1/(safety L_hat)``, with ``L_hat`` *estimated*.
        sigma_min_Z0, sigma_max_Z0: extreme singular values of the stacked ``Z_0``.
        assumptions: the table of :func:`check_assumptions` ((A0)-(A4)); assumptions_hold: all hold.
        part_b: :func:`part_b_check` at ``theta_0`` (part (b')).
        history: the run's :class:`~convres.gd.History`; check: its :class:`RunCheck`;
        params_final: the last iterate.
    """

    alpha: float
    sigma_0: float
    mu: float
    mu_max: float
    L_hat: float
    sigma_min_Z0: float
    sigma_max_Z0: float
    assumptions: list
    part_b: dict
    history: History
    check: RunCheck
    params_final: dict

    @property
    def assumptions_hold(self) -> bool:
        return all(c.holds for c in self.assumptions)

    @property
    def status(self) -> str:
        return self.history.status

    def summary(self) -> dict:
        """The scalar fields, JSON-ready (what ``python -m convres theorem --json`` prints).
        ``violations`` and ``max_excess`` are ``None`` when the run diverged or no step was checked:
        then nothing was verified. ``part_b_holds``: ``False`` when part (b') is certified to
        fail, ``True`` when it is certified to hold, ``None`` when neither is decided."""
        verified = self.status != "diverged" and self.check.checked_steps > 0
        h, b = self.history, self.part_b
        fin = lambda v: None if v is None or not math.isfinite(v) else float(v)  # noqa: E731
        return {
            "status": self.status, "alpha": self.alpha, "sigma_min_H0": self.sigma_0, "mu": self.mu,
            "mu_max": self.mu_max, "mu_max_is_estimate": True, "sigma_min_Z0": self.sigma_min_Z0,
            "sigma_max_Z0": self.sigma_max_Z0, "assumptions_hold": self.assumptions_hold,
            "violations": self.check.violations if verified else None,
            "max_excess": self.check.max_excess if verified else None,
            "checked_steps": self.check.checked_steps, "observed_steps": self.check.observed,
            "initial_loss": float(h.loss[0]) if len(h.loss) else None,
            "final_loss": float(h.loss[-1]) if len(h.loss) else None, "steps": h.steps,
            "rho": fin(b["rho"]), "r_sigma_upper": fin(b["r_sigma_upper"]),
            "r_sigma_lower": fin(b["r_sigma_lower"]),
            "part_b_holds": False if b["fails"] else b["holds"],
        }


def theorem_run(params, X, Y, cfg, *, steps: int = 300, mu: float | None = None, safety: float = 2.0,
                smoothness_samples: int = 1, seed: int = 0) -> TheoremRun:
    """Run gradient descent with the theorem's step (``mu`` defaults to :func:`mu_max`) and measure
    the theorem's inequalities at every step; see :class:`TheoremRun`."""
    _check_per_token(params, X, Y, cfg)
    _positive("steps", steps, integer=True)
    if mu is not None:
        _positive("mu", mu)
    if not (isinstance(safety, numbers.Real) and not isinstance(safety, bool) and safety >= 1):
        raise ValueError(f"safety must be a number >= 1, got {safety!r}.")
    if not isinstance(smoothness_samples, numbers.Integral) or smoothness_samples < 0:
        raise ValueError(f"smoothness_samples must be a non-negative integer, got {smoothness_samples!r}.")
    L_hat = _smoothness(params, X, Y, cfg, None, smoothness_samples, 20, seed)["L_hat"]
    m_max = math.inf if L_hat == 0 else 1.0 / (safety * L_hat)
    if mu is None and L_hat == 0:
        raise ValueError("the estimated Hessian of the loss is 0 at the initialization, so the theorem's "
                         "step size 1/(safety L_hat) is not defined; pass mu=... explicitly.")
    mu = m_max if mu is None else mu
    tr = _trace(params, X, cfg)
    sigma_0 = sigma_nn(tr.H[-1].detach())
    sZ = singular_values(stacked(tr.Z[0]).detach(), "Z_0")
    grad_U, dist, sig_H = [], [], []

    def record(step: Step):  # the quantities of the proof at every iterate theta_t
        if step.grads is not None:
            grad_U.append(float(step.grads["W_U"].norm()))
        dist.append(_flat_norm(step.params[k] - params[k] for k in params))
        sig_H.append(sigma_nn(step.H_L))

    final, hist = gradient_descent(params, X, Y, cfg, mu, steps, record_every=steps, callback=record)
    a = alpha(sigma_0)
    if hist.diverged:  # the arrays of the last (non-finite) iterate were not recorded
        grad_U, sig_H, dist = grad_U[:hist.steps], sig_H[:hist.steps + 1], dist[:hist.steps + 1]
    check = verify_run(hist, grad_U[:hist.steps], sig_H, mu, a, L_hat, dist) if len(hist.loss) else \
        RunCheck(*(np.zeros(0),) * 5, 0, float("nan"), 0, 0, float("nan"))
    return TheoremRun(alpha=a, sigma_0=sigma_0, mu=mu, mu_max=m_max, L_hat=L_hat,
                      sigma_min_Z0=sigma_nn(tr.Z[0].detach()), sigma_max_Z0=float(sZ[0]),
                      assumptions=_assumptions(params, X, cfg, mu, steps, 0.9),
                      part_b=_part_b(params, X, Y, cfg), history=hist, check=check,
                      params_final=final)


# --- the second theorem: PL through the last FFN's W_2 (book: *The theorem*, thm-ffn) -------------

def _ffn_rows(cfg: ModelConfig, N: int, n: int) -> int:
    """The number of output rows the FFN theorem must cover: ``N n`` per token, ``N`` pooled."""
    return N if cfg.pool == "mean" else N * n


def _activation_rows(Z_last: torch.Tensor, W_1: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """``M~``: the activation outputs ``M = act(Z_L W_1)`` of the last block, stacked
    (``N n x m``), or their mean over the tokens of each sequence (``N x m``, ``pool="mean"``)."""
    M = cfg.act(Z_last @ W_1)
    return M.mean(dim=-2) if cfg.pool == "mean" else stacked(M)


def _sigma_rows(M: torch.Tensor) -> float:
    """``sigma_k(M)`` for ``M`` with ``k`` rows (``0`` when ``k`` exceeds the columns), computed in
    float64 from the ``k x k`` Gram matrix when ``k`` is the smaller side (one symmetric
    eigenvalue problem instead of an SVD)."""
    M = M.detach().to(torch.float64)
    k, m = M.shape
    if k > m:
        return 0.0
    if not bool(torch.isfinite(M).all()):
        raise ValueError("the activation outputs are not finite; the run overflowed.")
    if k <= 64 or 4 * k > 3 * m:
        return float(singular_values(M)[k - 1]) if k <= 256 else \
            math.sqrt(max(float(torch.linalg.eigvalsh(M @ M.T)[0]), 0.0))
    return math.sqrt(max(float(torch.linalg.eigvalsh(M @ M.T)[0]), 0.0))


def _sigma_readout(W_U: torch.Tensor) -> float:
    """``sigma_c(W_U)``, the smallest singular value of the ``d x c`` readout (0 when ``c > d``)."""
    d, c = W_U.shape
    return 0.0 if c > d else float(singular_values(W_U.detach().to(torch.float64), "W_U")[c - 1])


def ffn_sigmas(params, X, cfg) -> dict:
    """The FFN theorem's constants at ``params`` (book: *The theorem*, equation (thm-ffn-alpha)):
    ``rows`` (``N n`` per token, ``N`` pooled), ``sigma_M = sigma_rows(M~)`` of the last block's
    activation outputs (their mean per sequence when pooled), ``sigma_U = sigma_c(W_U)`` and
    ``alpha_ffn = (sigma_M sigma_U / 4)^2``."""
    check_inputs(params, X, None, cfg)
    with torch.no_grad():
        tr = _trace(params, X, cfg)
        M = _activation_rows(tr.Z[-1], params[f"layer{cfg.L}.W_1"], cfg)
    sM, sU = _sigma_rows(M), _sigma_readout(params["W_U"])
    return {"rows": _ffn_rows(cfg, X.shape[0], X.shape[1]), "sigma_M": sM, "sigma_U": sU,
            "alpha_ffn": alpha_ffn(sM, sU)}


def alpha_ffn(sigma_M0: float, sigma_U0: float) -> float:
    """The FFN theorem's rate ``alpha' = (sigma_M0 sigma_U0 / 4)^2`` (equation (thm-ffn-alpha)):
    the PL constant ``sigma_rows(M~)^2 sigma_c(W_U)^2`` with both singular values at half their
    initial values."""
    return (sigma_M0 * sigma_U0 / 4) ** 2


def _hypothesis(holds, value, threshold, note: str = "") -> dict:
    out = {"holds": None if holds is None else bool(holds),
           "value": None if value is None or not math.isfinite(value) else float(value),
           "threshold": float(threshold)}
    if note:
        out["note"] = note
    return out


@dataclasses.dataclass
class FFNTheoremRun:
    """Gradient descent checked against the FFN theorem (book: *The theorem*, thm-ffn).

    Attributes:
        alpha_ffn: ``alpha' = (sigma_M0 sigma_U0 / 4)^2``.
        sigma_M0: ``sigma_rows(M~_0)``, the smallest singular value of the activation outputs of
            the last block (per token: ``N n x m``; pooled: their mean per sequence, ``N x m``).
        sigma_U0: ``sigma_c(W_U^0)``.
        mu, rows, readout: the step size, the number of output rows, ``"per token"`` or ``"pooled"``.
        hypotheses: name -> ``{"holds", "value", "threshold"[, "note"]}`` (see
            :func:`ffn_theorem_run`).
        history: the run's :class:`~convres.gd.History`.
        steps_checked, bound_excess, pl_margin, descent_margin: per step ``t`` above the float
            floor: ``Phi_{t+1}/Phi_t - (1 - mu alpha')``, ``||grad_{W_2} Phi_t||^2 / (2 Phi_t) -
            alpha'`` and ``(Phi_t - mu/2 ||g_t||^2 - Phi_{t+1}) / Phi_t``.
        recorded_steps, sigma_M, sigma_U: the singular values at the recorded steps.
        lemma_margin: at the recorded steps, ``||grad_{W_2} Phi||^2 / (2 Phi) - sigma_M^2 sigma_U^2``
            (the PL lemma itself: never negative up to round-off).
        observed: recorded steps ``t < T`` where every hypothesis of part (a) was measured to hold.
        tolerance: the relative round-off tolerance of the run's dtype.
        dtype: the dtype of the run.
        params_final: the last iterate.
    """

    alpha_ffn: float
    sigma_M0: float
    sigma_U0: float
    mu: float
    rows: int
    readout: str
    hypotheses: dict
    history: History
    steps_checked: np.ndarray
    bound_excess: np.ndarray
    pl_margin: np.ndarray
    descent_margin: np.ndarray
    recorded_steps: np.ndarray
    sigma_M: np.ndarray
    sigma_U: np.ndarray
    lemma_margin: np.ndarray
    observed: int
    tolerance: float
    dtype: str
    params_final: dict

    @property
    def status(self) -> str:
        return self.history.status

    @property
    def verified(self) -> bool:
        """Whether anything was verified (the run did not diverge, and at least one step was
        checked)."""
        return self.status != "diverged" and len(self.steps_checked) > 0

    @property
    def violations(self) -> int | None:
        """Checked steps with ``Phi_{t+1} > (1 - mu alpha') Phi_t`` beyond round-off; ``None``
        when nothing was verified."""
        return int((self.bound_excess > self.tolerance).sum()) if self.verified else None

    def summary(self) -> dict:
        """The scalar fields, JSON-ready (no NaN: undefined values are ``None``)."""
        h = self.history
        fin = lambda v: None if v is None or not math.isfinite(v) else float(v)  # noqa: E731
        return {
            "theorem": "thm-ffn", "claim": "observed", "readout": self.readout, "rows": self.rows,
            "alpha_ffn": fin(self.alpha_ffn), "sigma_M0": fin(self.sigma_M0), "sigma_U0": fin(self.sigma_U0),
            "mu": self.mu, "mu_alpha": fin(self.mu * self.alpha_ffn), "hypotheses": self.hypotheses,
            "hypotheses_hold": all(v["holds"] for v in self.hypotheses.values()),
            "violations": self.violations,
            "max_excess": fin(float(self.bound_excess.max())) if self.verified else None,
            "checked_steps": int(len(self.steps_checked)), "observed_steps": int(self.observed),
            "recorded_steps": int(len(self.recorded_steps)),
            "min_lemma_margin": fin(float(self.lemma_margin.min())) if len(self.lemma_margin) else None,
            "initial_loss": fin(float(h.loss[0])) if len(h.loss) else None,
            "final_loss": fin(float(h.loss[-1])) if len(h.loss) else None,
            "steps": h.steps, "status": self.status, "dtype": self.dtype,
        }


def ffn_theorem_run(params, X, Y, cfg, *, mu: float, steps: int, record_every: int = 1,
                    seed: int = 0, smoothness_iters: int = 10) -> FFNTheoremRun:
    """Run gradient descent and check the FFN theorem (book: *The theorem*, thm-ffn) along it.

    The theorem goes through the last block's ``W_2`` (any depth ``L``, per-token or pooled
    readout): with ``M~`` the activation outputs ``act(Z_L W_1)`` of the last block (per token,
    ``N n x m``) or their mean per sequence (``pool="mean"``, ``N x m``), the PL lemma
    ``||grad Phi||^2 >= ||grad_{W_2} Phi||_F^2 >= 2 sigma_rows(M~)^2 sigma_c(W_U)^2 Phi`` gives
    ``Phi_{t+1} <= (1 - mu alpha') Phi_t`` with ``alpha' = (sigma_M0 sigma_U0 / 4)^2`` while both
    singular values stay above half their initial values and the descent inequality holds.

    What is checked, and where:

    * at **every** step ``t`` (exact and cheap, from the gradient the step computes anyway): the
      bound ``Phi_{t+1} <= (1 - mu alpha') Phi_t`` (``violations``), the PL inequality with constant
      ``alpha'`` (``pl_margin``) and the descent inequality ``Phi_{t+1} <= Phi_t - mu/2 ||g_t||^2``;
    * at the **recorded** steps only (every ``record_every`` steps and the last): ``sigma_rows(M~_t)``
      (one ``rows x rows`` symmetric eigenvalue problem in float64, about 3 s at ``N = m = 2048``
      on 2 cores) and ``sigma_c(W_U)``. ``observed_steps`` counts the recorded steps at which every
      hypothesis of part (a) was measured to hold; between recorded steps the sigma conditions are
      not measured, so the per-step claim is *observed* only at the recorded steps.

    Nothing here is certified before the run: ``mu <= 1/L_B`` is not established (the hypothesis
    ``step_size`` compares ``mu`` with an *estimate* ``L_hat_0`` of the Hessian norm at
    ``theta_0``, a lower bound of ``L_B``: if it fails, ``mu <= 1/L_B`` is certified to fail).

    dtype: the run may be float32 (faster); the singular values are then computed in float64 from
    the float32 iterates, and a step counts as a violation only beyond ``100 eps`` of the run's
    dtype (``1.2e-5`` in float32, ``FLOAT_TOL = 1e-9`` in float64). In float32 the check can only
    resolve a guaranteed contraction ``mu alpha'`` well above ``1e-5``.

    Args:
        params, X, Y, cfg: an instance (any ``L``, ``pool`` ``None`` or ``"mean"``).
        mu: the step size (> 0); steps: the number of steps (>= 1).
        record_every: singular values every this many steps (and at the last).
        seed: seed of the random start vector of the power iteration for ``L_hat_0``.
        smoothness_iters: power-iteration steps for ``L_hat_0`` (0 skips that hypothesis).

    Hypotheses (``hypotheses[name] = {"holds", "value", "threshold"}``): ``width`` (``m >= rows``),
    ``output_dim`` (``c <= d``), ``smooth_activation``, ``full_rank_activations``
    (``sigma_M0 / ||M~_0||_2 > 1e-10``), ``full_rank_readout``, ``non_vacuous_rate``
    (``mu alpha' T >= ln(1/0.9)``), ``step_size`` (``mu L_hat_0 <= 1``), and, measured along the run,
    ``sigma_M_along_run`` and ``sigma_U_along_run`` (the smallest ratio to the initial value over the
    recorded steps, threshold 1/2) and ``descent_along_run`` (the smallest relative descent margin,
    threshold ``-tolerance``).
    """
    check_inputs(params, X, Y, cfg)
    _positive("mu", mu)
    _positive("steps", steps, integer=True)
    _positive("record_every", record_every, integer=True)
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}.")
    if not isinstance(smoothness_iters, numbers.Integral) or isinstance(smoothness_iters, bool) \
            or smoothness_iters < 0:
        raise ValueError(f"smoothness_iters must be a non-negative integer, got {smoothness_iters!r}.")
    return _ffn_run(params, X, Y, cfg, float(mu), int(steps), int(record_every), int(seed),
                    int(smoothness_iters))


def _ffn_run(params, X, Y, cfg, mu, steps, record_every, seed, smoothness_iters) -> FFNTheoremRun:
    N, n = X.shape[0], X.shape[1]
    rows, last = _ffn_rows(cfg, N, n), f"layer{cfg.L}"
    dtype = params["W_U"].dtype
    tol = FLOAT_TOL if dtype == torch.float64 else 100 * torch.finfo(dtype).eps
    with torch.no_grad():
        tr = _trace(params, X, cfg)
        M0 = _activation_rows(tr.Z[-1], params[f"{last}.W_1"], cfg)
    sM0, sU0 = _sigma_rows(M0), _sigma_readout(params["W_U"])
    a = alpha_ffn(sM0, sU0)
    gW2, rec, sM, sU, lemma = [], [], [], [], []

    def record(step: Step):
        if step.grads is not None:
            gW2.append(float(step.grads[f"{last}.W_2"].double().pow(2).sum()))
        if step.t % record_every == 0 or step.t == steps or step.grads is None:
            with torch.no_grad():
                Z_last = step.Z_1 if cfg.L == 1 else _trace(step.params, X, cfg).Z[-1]
                M = _activation_rows(Z_last, step.params[f"{last}.W_1"], cfg)
            rec.append(step.t)
            sM.append(_sigma_rows(M))
            sU.append(_sigma_readout(step.params["W_U"]))
            if step.grads is not None and step.loss > 0:
                lemma.append(gW2[-1] / (2 * step.loss) - (sM[-1] * sU[-1]) ** 2)

    final, hist = gradient_descent(params, X, Y, cfg, mu, steps, record_every=max(steps, 1),
                                   callback=record)
    loss = np.asarray(hist.loss, dtype=np.float64)
    T = hist.steps
    g = np.asarray(hist.grad_norm, dtype=np.float64)[:T]
    gW2a = np.asarray(gW2[:T], dtype=np.float64)
    keep = np.nonzero(loss[:T] > LOSS_FLOOR * loss[0])[0] if T > 0 else np.zeros(0, dtype=int)
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = loss[1:T + 1][keep] / loss[keep] - (1 - mu * a)
        pl = gW2a[keep] / (2 * loss[keep]) - a
        descent = (loss[keep] - mu / 2 * g[keep] ** 2 - loss[1:T + 1][keep]) / loss[keep]
    rec_a, sM_a, sU_a = (np.asarray(v, dtype=np.float64) for v in (rec, sM, sU))
    ok_desc = {int(t): bool(dm >= -tol) for t, dm in zip(keep, descent)}
    observed = sum(1 for t, m_, u_ in zip(rec_a.astype(int), sM_a, sU_a)
                   if t < T and ok_desc.get(int(t), False) and m_ >= sM0 / 2 and u_ >= sU0 / 2)
    m = cfg.m
    norm_M0 = float(singular_values(M0.detach().double())[0]) if min(M0.shape) <= 2048 else \
        math.sqrt(float(torch.linalg.eigvalsh(M0.double() @ M0.double().T)[-1]))
    norm_U0 = float(singular_values(params["W_U"].detach().double())[0])
    L_hat = _hessian_norm(params, X, Y, cfg, smoothness_iters, seed) if smoothness_iters else None
    rate = mu * a * T
    hyp = {
        "width": _hypothesis(m >= rows, m, rows, "FFN width m >= number of output rows"),
        "output_dim": _hypothesis(cfg.c <= cfg.d, cfg.c, cfg.d, "outputs c <= d"),
        "smooth_activation": _hypothesis(cfg.act.smooth, float(cfg.act.smooth), 1.0,
                                         "act' Lipschitz (gelu, tanh, softplus)"),
        "full_rank_activations": _hypothesis(sM0 > 1e-10 * norm_M0, sM0 / max(norm_M0, 1e-300), 1e-10,
                                             "sigma_rows(M~_0) / ||M~_0||_2"),
        "full_rank_readout": _hypothesis(sU0 > 1e-10 * norm_U0, sU0 / max(norm_U0, 1e-300), 1e-10,
                                         "sigma_c(W_U^0) / ||W_U^0||_2"),
        "non_vacuous_rate": _hypothesis(rate >= -math.log(0.9), rate, -math.log(0.9),
                                        "mu alpha' T >= ln(1/0.9)"),
    }
    if L_hat is not None:
        hyp["step_size"] = _hypothesis(mu * L_hat <= 1, mu * L_hat, 1.0,
                                       "mu L_hat_0 <= 1, L_hat_0 an estimate (lower bound) of L_B at "
                                       "theta_0: a failure certifies mu > 1/L_B")
    hyp["sigma_M_along_run"] = _hypothesis(bool(len(sM_a)) and sM0 > 0 and sM_a.min() >= sM0 / 2,
                                           sM_a.min() / sM0 if len(sM_a) and sM0 > 0 else None, 0.5,
                                           "min over recorded steps of sigma_rows(M~_t) / sigma_M0")
    hyp["sigma_U_along_run"] = _hypothesis(bool(len(sU_a)) and sU0 > 0 and sU_a.min() >= sU0 / 2,
                                           sU_a.min() / sU0 if len(sU_a) and sU0 > 0 else None, 0.5,
                                           "min over recorded steps of sigma_c(W_U,t) / sigma_U0")
    hyp["descent_along_run"] = _hypothesis(bool(len(descent)) and descent.min() >= -tol,
                                           float(descent.min()) if len(descent) else None, -tol,
                                           "min over steps of (Phi_t - mu/2 ||g_t||^2 - Phi_{t+1}) / Phi_t")
    return FFNTheoremRun(alpha_ffn=a, sigma_M0=sM0, sigma_U0=sU0, mu=mu, rows=rows,
                         readout="pooled" if cfg.pool == "mean" else "per token", hypotheses=hyp,
                         history=hist, steps_checked=keep, bound_excess=excess, pl_margin=pl,
                         descent_margin=descent, recorded_steps=rec_a.astype(int), sigma_M=sM_a,
                         sigma_U=sU_a, lemma_margin=np.asarray(lemma, dtype=np.float64), observed=observed,
                         tolerance=tol, dtype=str(dtype).replace("torch.", ""), params_final=final)


# --- scope: which experiment lies inside which theorem (book: *The theorem*, section Scope) -------

#: The theorems of the book that :func:`scope_table` evaluates: label -> short name.
THEOREMS = {"thm-main": "through W_U (per token; ml-thm for L > 1)",
            "thm-ffn": "through the last W_2 (per token or pooled)"}

#: The experiments :func:`scope_table` reads (their ``"book"`` settings).
SCOPE_EXPERIMENTS = ("simulations", "jena", "sst2", "rank_collapse_gd")


def parameter_count(cfg: ModelConfig) -> int:
    """``p``, the number of trainable weights: ``L (2 d d_qk + d^2 + 2 d m) + d c``."""
    return cfg.L * (2 * cfg.d * cfg.d_qk + cfg.d * cfg.d + 2 * cfg.d * cfg.m) + cfg.d * cfg.c


def _jena_shape(s: dict) -> tuple[int, int, int, str]:
    """``(N, n, d, note)`` of the Jena task from its settings, without loading the data: the
    training rows are counted on the regular time grid of ``start .. train_end`` (or ``end``) at
    ``freq``, and the windows as in :func:`convres.experiments.jena_data` (``window`` rows every
    ``stride`` rows, each needing ``horizon`` more rows for its targets)."""
    import pandas as pd

    from .data import JENA_FEATURES
    end = s.get("train_end", s.get("end"))
    rows = len(pd.date_range(s["start"], end, freq=s["freq"]))
    w, stride, horizon = int(s["window"]), int(s.get("stride", 1)), int(s.get("horizon", 1))
    N = len(range(0, rows - w - horizon + 1, stride))
    d = int(s.get("d", len(s.get("features", JENA_FEATURES))))
    return N, w, d, (f"{N} training windows of {w} rows, counted on the {s['freq']} grid "
                     f"{s['start']} .. {end} (no data loaded)")


def experiment_shapes(name: str, s: dict) -> list[dict]:
    """The model and data shapes of experiment ``name`` with settings ``s`` (one entry per model:
    the simulation regimes, the SST-2 depths and its wide-FFN configuration, the rank-collapse
    d_QK values): dicts with ``label``, ``cfg`` (a :class:`~convres.model.ModelConfig`), ``N``,
    ``n`` and ``note``. Shapes only: no data is loaded and nothing is trained."""
    act = s.get("activation", "relu")
    if name == "simulations":
        regimes = s.get("regimes") or [dict(name=None, N=s["N"], d_qk=s.get("d_qk", s["d"]),
                                            scale=s.get("scale", "1/sqrt(d_qk)"))]
        return [dict(label="simulations" + (f" ({r['name']})" if r.get("name") else ""),
                     N=int(r.get("N", s["N"])), n=int(s["n"]), note="",
                     cfg=ModelConfig(d=s["d"], d_qk=int(r.get("d_qk", s.get("d_qk", s["d"]))), m=s["m"],
                                     c=1, activation=r.get("activation", act),
                                     scale=r.get("scale", s.get("scale", "1/sqrt(d_qk)"))))
                for r in regimes]
    if name == "jena":
        N, n, d, note = _jena_shape(s)
        return [dict(label="jena", N=N, n=n, note=note,
                     cfg=ModelConfig(d=d, d_qk=s.get("d_qk", d), m=s["m"], c=1, activation=act))]
    if name == "sst2":
        N = int(s.get("n_train", s.get("train_size", s.get("size"))))
        n = int(s.get("n_tokens", s.get("n")))
        out = [dict(label=f"sst2 L={L}", N=N, n=n, note="pooled readout (mean over tokens)",
                    cfg=ModelConfig(d=s["d"], d_qk=s.get("d_qk", s["d"]), m=s["m"], c=1, L=L,
                                    activation=act, pool="mean"))
               for L in s.get("depths", [s.get("L", 1)])]
        w = s.get("wide")
        if w:
            L, m = int(w.get("L", 1)), int(w.get("m", s["m"]))
            out.append(dict(label=f"sst2 wide FFN (L={L}, m={m})", N=int(w.get("n_train", N)), n=n,
                            note="the wide-FFN configuration, pooled readout",
                            cfg=ModelConfig(d=s["d"], d_qk=s.get("d_qk", s["d"]), m=m, c=1, L=L,
                                            activation=w.get("activation", act), pool="mean")))
        return out
    if name == "rank_collapse_gd":
        qks = sorted({r["d_qk"] for r in s["runs"]})
        return [dict(label=f"rank_collapse_gd d_QK={q}", N=s["N"], n=s["n"], note="",
                     cfg=ModelConfig(d=s["d"], d_qk=q, m=s["m"], c=1, activation=act,
                                     scale=s.get("scale", "1/sqrt(d_qk)")))
                for q in qks]
    raise ValueError(f"unknown experiment {name!r}; choose one of {SCOPE_EXPERIMENTS}.")


def scope_rows(label: str, cfg: ModelConfig, N: int, n: int, note: str = "") -> list[dict]:
    """The hypotheses of both theorems that the shapes of one model decide (see
    :func:`scope_table`), for a model ``cfg`` trained on ``N`` sequences of ``n`` tokens."""
    pooled = cfg.pool == "mean"
    rows_out = N if pooled else N * n
    p = parameter_count(cfg)
    smooth = cfg.act.smooth
    act = f"{cfg.activation}: " + ("smooth" if smooth else "not smooth (act' jumps)")

    def row(theorem, hypothesis, holds, value, threshold, why):
        return {"experiment": label, "theorem": theorem, "hypothesis": hypothesis, "holds": holds,
                "value": value, "threshold": threshold, "note": why}

    out = [
        row("thm-main", "per-token readout", not pooled, 0.0 if pooled else 1.0, 1.0,
            "the theorem through W_U is stated per token" + ("; this model pools" if pooled else "")),
        row("thm-main", "(A1) width N n <= d", N * n <= cfg.d, float(N * n), float(cfg.d),
            f"N n = {N} x {n}" + (f"; {note}" if note else "")),
        row("thm-main", "(A2) smooth activation", smooth, float(smooth), 1.0, act),
        row("thm-main", "any PL: parameters p >= outputs", p >= rows_out * cfg.c, float(p),
            float(rows_out * cfg.c), "a PL inequality needs rank J = outputs; fewer weights exclude it"),
        row("thm-ffn", "(F1) width m >= rows", cfg.m >= rows_out, float(cfg.m), float(rows_out),
            f"rows = {'N (pooled)' if pooled else 'N n (per token)'} = {rows_out}"),
        row("thm-ffn", "(F2) outputs c <= d", cfg.c <= cfg.d, float(cfg.c), float(cfg.d), "sigma_c(W_U) > 0 possible"),
        row("thm-ffn", "(A2) smooth activation", smooth, float(smooth), 1.0, act),
        row("thm-ffn", "any PL: parameters p >= outputs", p >= rows_out * cfg.c, float(p),
            float(rows_out * cfg.c), "a PL inequality needs rank J = outputs; fewer weights exclude it"),
    ]
    return out


def scope_table(profile: str = "book", experiments=SCOPE_EXPERIMENTS) -> list[dict]:
    """Which hypotheses of the book's two theorems each experiment meets (book: *The theorem*,
    section Scope; the reproduction report shows the same rows).

    Computed from :func:`convres.experiments.settings` ``(name, profile)`` (shapes only: no data is
    loaded, nothing is trained). One row per experiment model x theorem x hypothesis, a dict with
    ``experiment``, ``theorem`` (``"thm-main"``: through ``W_U``, per token, also the multi-layer
    ``ml-thm``; ``"thm-ffn"``: through the last ``W_2``), ``hypothesis``, ``holds`` (bool),
    ``value``, ``threshold`` and ``note``. Only the hypotheses that the shapes decide are listed:
    the width conditions, the smoothness of the activation, the readout, and the parameter count
    ``p >= outputs`` (``rows c``, rows = ``N n`` per token or ``N`` pooled) below which no PL
    inequality (hence no linear convergence to zero loss) is possible under any theorem. The remaining hypotheses (non-degenerate start, step size, the
    whole-run radius) depend on the weights and are measured or certified in the chapters.
    """
    from .experiments import settings  # experiments imports this module: import at call time

    if isinstance(experiments, str):
        experiments = (experiments,)
    rows = []
    for name in experiments:
        for shape in experiment_shapes(name, settings(name, profile)):
            rows += scope_rows(shape["label"], shape["cfg"], shape["N"], shape["n"], shape["note"])
    return rows
