"""The theory's computable quantities: the book's linear-convergence theorem, checked numerically.

Book chapters: *Assumptions* (``book/assumptions.md``), *The theorem* (``book/theorem.md``) and
*Multi-layer* (``book/multilayer.md``). Paper: arXiv:2506.05249 (main theorem: under proper
initialization ``Phi(theta_{t+1}) <= (1 - mu alpha) Phi(theta_t)``). The constants below are the
**book's own** (the paper's are not available to this project).

Notation (book, chapter *The theorem*): the stacked matrices ``Z`` (first block's attention output
with its residual) and ``H`` (last hidden matrix, the input of ``W_U``) have ``N n`` rows and ``d``
columns; ``sigma_0 = sigma_Nn(H_0)`` (:func:`convres.rank.sigma_nn`, 0 when ``N n > d``).

* PL lemma: ``||grad Phi||^2 >= ||grad_{W_U} Phi||_F^2 >= 2 sigma_Nn(H)^2 Phi``.
* Descent lemma: ``mu <= 1/L_Phi`` gives ``Phi(theta - mu g) <= Phi - mu/2 ||g||^2``.
* Together: ``Phi_{t+1} <= (1 - mu sigma_Nn(H_t)^2) Phi_t``; with ``alpha = (sigma_0/2)^2``
  (:func:`alpha`) the uniform rate holds as long as ``sigma_Nn(H_t) >= sigma_0/2``.
* Residual lemma: ``sigma_Nn(Z) >= beta sigma_Nn(X) - ||Attn(X)||_2`` (Weyl,
  :func:`convres.rank.weyl_lower_bounds`).

The smoothness constant ``L_Phi`` is **estimated** here (:func:`smoothness_estimate`: the largest
Hessian eigenvalue in absolute value by power iteration with Hessian-vector products, at sampled
points); it is not a certified bound. A run measures every inequality of the proof at every step
(:func:`verify_run`): what it establishes is *observed*, not certified before the run.
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
    "mu_max", "residual_lemma", "ffn_lemma", "r_sigma_upper", "part_b_check", "AssumptionCheck",
    "check_assumptions", "RunCheck", "verify_run", "theorem_instance", "TheoremRun", "theorem_run",
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
    return 1.0 / (safety * smoothness_estimate(params, X, Y, cfg, **kwargs)["L_hat"])


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


def part_b_check(params, X, Y, cfg) -> dict:
    """Can part (b) of the book's theorem (equation (thm-init)) apply to this instance?

    Part (b) needs ``2 J_B sqrt(2 Phi_0) / alpha <= r <= r_sigma``. Since ``theta_0`` is in ``B``,
    ``J_B >= J_0 := ||grad Phi(theta_0)|| / sqrt(2 Phi_0)``, so the left side is at least
    ``radius_lower = 2 J_0 sqrt(2 Phi_0) / alpha``; and ``r_sigma <= r_sigma_upper``. When
    ``radius_lower > r_sigma_upper`` no radius ``r`` satisfies the condition: ``fails`` is then
    ``True``, a certificate (up to float64). ``fails = False`` does **not** certify the condition.
    Returns ``{"J0", "radius_lower", "r_sigma_upper", "fails"}``.
    """
    _check_per_token(params, X, Y, cfg)
    return _part_b(params, X, Y, cfg)


def _part_b(params, X, Y, cfg) -> dict:
    phi, grads, tr = _loss_and_grad(params, X, Y, cfg, None)
    phi, a = float(phi), alpha(sigma_nn(tr.H[-1].detach()))
    upper = _r_sigma_upper(params, X, cfg)
    if phi == 0.0 or a == 0.0:
        return {"J0": float("nan"), "radius_lower": math.inf if a == 0.0 else 0.0,
                "r_sigma_upper": upper, "fails": a == 0.0}
    J0 = _flat_norm(grads.values()) / math.sqrt(2 * phi)
    lower = 2 * J0 * math.sqrt(2 * phi) / a
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
    checks = [
        AssumptionCheck("width", "N n <= d", float(N * n), float(cfg.d), N * n <= cfg.d),
        AssumptionCheck("smooth activation", "act' is Lipschitz (gelu, tanh, softplus)",
                        float(smooth), 1.0, smooth),
    ]
    rel_x = sigma_nn(Xs) / max(float(singular_values(Xs)[0]), 1e-300)
    checks.append(AssumptionCheck("full-rank input", "sigma_Nn(X) / ||X||_2 > 1e-10", rel_x, 1e-10,
                                  rel_x > 1e-10))
    sigma_0 = sigma_nn(H0)
    rel_h = sigma_0 / max(float(singular_values(H0, "H_0")[0]), 1e-300)
    checks.append(AssumptionCheck("non-degenerate H_0", "sigma_Nn(H_0) / ||H_0||_2 > 1e-10", rel_h,
                                  1e-10, rel_h > 1e-10))
    if mu is not None:
        need, val = -math.log(min_decrease), mu * alpha(sigma_0) * steps
        checks.append(AssumptionCheck("non-vacuous rate", f"mu alpha T >= ln(1/{min_decrease:g})",
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
        part_b: :func:`part_b_check` at ``theta_0``.
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
        then nothing was verified."""
        verified = self.status != "diverged" and self.check.checked_steps > 0
        h = self.history
        return {
            "status": self.status, "alpha": self.alpha, "sigma_min_H0": self.sigma_0, "mu": self.mu,
            "mu_max": self.mu_max, "mu_max_is_estimate": True, "sigma_min_Z0": self.sigma_min_Z0,
            "sigma_max_Z0": self.sigma_max_Z0, "assumptions_hold": self.assumptions_hold,
            "violations": self.check.violations if verified else None,
            "max_excess": self.check.max_excess if verified else None,
            "checked_steps": self.check.checked_steps,
            "initial_loss": float(h.loss[0]) if len(h.loss) else None,
            "final_loss": float(h.loss[-1]) if len(h.loss) else None, "steps": h.steps,
            "part_b_holds": False if self.part_b["fails"] else None,
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
    m_max = 1.0 / (safety * L_hat)
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
