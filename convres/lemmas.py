"""The theory's lemmas as computable quantities, each formula in one place (inputs checked by the
callers): ``Z``, ``H`` stacked ``N n x d``, ``sigma_0 = sigma_Nn(H_0)``, ``M = act(Z W_1)``."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from .model import ModelConfig, layer_params, phi, trace_no_grad
from .rank import sigma_k, sigma_nn, singular_values, spectral_norm, stacked
from .values import as_int, as_real

__all__ = ["alpha", "path_radius", "alpha_ffn", "rate_alpha", "flat_norm", "hessian_norm",
           "smoothness_estimate", "mu_max", "residual_lemma", "ffn_lemma", "r_sigma_upper",
           "ffn_rows", "activation_rows", "ffn_sigmas", "parameter_count", "chain_bound", "random_point"]


def alpha(sigma_0: float) -> float:
    """The theorem's rate ``alpha = (sigma_0 / 2)^2`` (equation (thm-alpha))."""
    return (sigma_0 / 2) ** 2


def path_radius(phi_0: float, sigma_0: float) -> float:
    """``rho = 4 sqrt(2 Phi_0) / sigma_0``, the path-length bound of part (b) of ``thm-main``."""
    return 4 * math.sqrt(2 * phi_0) / sigma_0 if sigma_0 > 0 else math.inf


def alpha_ffn(sigma_M0: float, sigma_U0: float) -> float:
    """The FFN theorem's rate ``alpha' = (sigma_M0 sigma_U0 / 4)^2`` (equation (thm-ffn-alpha))."""
    return (sigma_M0 * sigma_U0 / 4) ** 2


def rate_alpha(params: Mapping[str, torch.Tensor], X: torch.Tensor, cfg: ModelConfig) -> float:
    """``alpha`` of an instance: :func:`alpha` of ``sigma_Nn(H_0)``, ``H_0`` the last hidden matrix."""
    return alpha(sigma_nn(trace_no_grad(params, X, cfg).H[-1]))


def flat_norm(tensors) -> float:
    """The Euclidean norm of a collection of tensors taken as one vector."""
    return math.sqrt(sum(float(t.detach().double().pow(2).sum()) for t in tensors))


def random_point(params, radius: float, gen: torch.Generator) -> dict:
    """``theta + radius u / ||u||``, ``u`` a Gaussian direction drawn from ``gen``."""
    u = {k: torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in params.items()}
    nu = flat_norm(u.values())
    return {k: params[k] + radius * u[k] / nu for k in params}


def hessian_norm(params, X, Y, cfg, *, iters: int = 20, seed: int = 0) -> float:
    """``||nabla^2 Phi(theta)||_2`` from below: power iteration on Hessian-vector products."""
    iters = as_int("iters", iters, minimum=1)
    names = list(params)

    def grad_at(*ws):
        return torch.func.grad(lambda p: phi(p, X, Y, cfg))(dict(zip(names, ws)))

    theta = tuple(params[k].detach() for k in names)
    gen = torch.Generator().manual_seed(seed)
    v = tuple(torch.randn(w.shape, generator=gen, dtype=w.dtype) for w in theta)
    lam = flat_norm(v)
    v = tuple(t / lam for t in v)
    for _ in range(iters):
        hv = torch.func.jvp(grad_at, theta, v)[1]
        lam = flat_norm(hv[k] for k in names)
        if not math.isfinite(lam):
            return math.inf
        if lam == 0.0:
            return 0.0
        v = tuple(hv[k] / lam for k in names)
    return lam


def smoothness_estimate(params, X, Y, cfg, *, radius: float | None = None, samples: int = 1,
                        iters: int = 20, seed: int = 0) -> dict:
    """``L_hat``: the largest :func:`hessian_norm` at ``params`` and ``samples`` points at ``radius``."""
    samples = as_int("samples", samples, minimum=0)
    radius = 0.1 * flat_norm(params.values()) if radius is None else as_real("radius", radius, minimum=0.0)
    at_init = hessian_norm(params, X, Y, cfg, iters=iters, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    sampled = [hessian_norm(random_point(params, radius, gen), X, Y, cfg, iters=iters, seed=seed)
               for _ in range(samples)]
    L_hat = max([at_init] + sampled)
    if not math.isfinite(L_hat):
        raise ValueError("the Hessian of the loss is not finite at the initialization (overflow): "
                         "check the scale of beta and of the data.")
    return {"L_hat": L_hat, "at_init": at_init, "samples": sampled, "radius": float(radius)}


def mu_max(params, X, Y, cfg, *, safety: float = 2.0, **kwargs) -> float:
    """``mu_max = 1 / (safety L_hat)`` (equation (thm-mu)) with ``L_hat`` of :func:`smoothness_estimate`."""
    safety = as_real("safety", safety, minimum=1.0)
    L_hat = smoothness_estimate(params, X, Y, cfg, **kwargs)["L_hat"]
    return math.inf if L_hat == 0 else 1.0 / (safety * L_hat)


def residual_lemma(params, X, cfg, *, layer: int = 1) -> dict:
    """Both sides of the residual lemma (thm-residual), ``Z = A + beta X_in``, ``weyl`` and ``crude``::

        sigma_Nn(Z) >= beta sigma_Nn(X_in) - ||A||_2 >= beta sigma_Nn(X_in) - sqrt(n) ||X_in||_2 ||W_V||_2

    Returns ``sigma_Z``, ``weyl`` (middle), ``crude`` (right), ``sigma_X`` and ``attn_norm``.
    """
    layer = as_int("layer", layer, minimum=1, maximum=cfg.L)
    tr = trace_no_grad(params, X, cfg)
    X_in = stacked(X if layer == 1 else tr.H[layer - 2])
    A = stacked(tr.A[layer - 1])
    beta = cfg.residual[0]
    attn_norm = spectral_norm(A)
    W_V = layer_params(params, layer)["W_V"]
    crude_norm = math.sqrt(X.shape[1]) * spectral_norm(X_in) * spectral_norm(W_V)
    sigma_X = sigma_nn(X_in)
    return {"sigma_Z": sigma_nn(tr.Z[layer - 1]), "sigma_X": sigma_X, "attn_norm": attn_norm,
            "weyl": beta * sigma_X - attn_norm, "crude": beta * sigma_X - crude_norm}


def ffn_lemma(params, X, cfg, *, layer: int = 1) -> dict:
    """Both sides of the FFN lemma (thm-ffn), ``H = FFN(Z) + beta Z``, ``weyl`` and ``crude``::

        sigma_Nn(H) >= beta sigma_Nn(Z) - ||FFN(Z)||_2 >= beta sigma_Nn(Z) - gain ||Z W_1||_F ||W_2||_2

    with ``gain = cfg.act.gain``. Returns ``sigma_H``, ``sigma_Z``, ``ffn_norm``, ``weyl``, ``crude``.
    """
    layer = as_int("layer", layer, minimum=1, maximum=cfg.L)
    tr = trace_no_grad(params, X, cfg)
    W = layer_params(params, layer)
    Z, H = stacked(tr.Z[layer - 1]), stacked(tr.H[layer - 1])
    beta = cfg.residual[1]
    ffn_norm = spectral_norm(H - beta * Z)
    crude_norm = cfg.act.gain * float(torch.linalg.matrix_norm(Z @ W["W_1"])) * spectral_norm(W["W_2"])
    sZ = sigma_nn(Z)
    return {"sigma_H": sigma_nn(H), "sigma_Z": sZ, "ffn_norm": ffn_norm,
            "weyl": beta * sZ - ffn_norm, "crude": beta * sZ - crude_norm}


def r_sigma_upper(params, X, cfg) -> float:
    """Lemma thm-lem-rsigma: ``r_sigma <= (sigma_0/2) ||M^+ u||``, ``u`` the ``N n``-th left singular
    vector of ``H_0`` (``inf`` when ``u`` is not in the range of ``M``)."""
    tr = trace_no_grad(params, X, cfg)
    H = stacked(tr.H[-1])
    rows, cols = H.shape
    if rows > cols:
        return math.inf
    singular_values(H, "H_0")  # a named error if H_0 is not finite
    U, S, _ = torch.linalg.svd(H, full_matrices=False)
    sigma0, u = float(S[rows - 1]), U[:, rows - 1]
    if sigma0 == 0.0:
        return math.inf
    M = stacked(tr.M[-1])
    w = torch.linalg.pinv(M) @ u  # the least-norm solution of M w = u
    if float((M @ w - u).norm()) > 1e-8:
        return math.inf
    return sigma0 / 2 * float(w.norm())


def ffn_rows(cfg: ModelConfig, N: int, n: int) -> int:
    """The number of output rows the FFN theorem must cover: ``N n`` per token, ``N`` pooled."""
    return N if cfg.pool == "mean" else N * n


def activation_rows(M: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """``M~``: the last activations ``M`` stacked (``N n x m``), or per-sequence means if pooled."""
    return M.mean(dim=-2) if cfg.pool == "mean" else stacked(M)


def ffn_sigmas(params, X, cfg) -> dict:
    """Equation thm-ffn-alpha: ``sigma_M = sigma_rows(M~)``, ``sigma_U = sigma_c(W_U)``, ``alpha_ffn``."""
    M = activation_rows(trace_no_grad(params, X, cfg).M[-1], cfg)
    sM, sU = sigma_k(M), sigma_k(params["W_U"].T)
    return {"rows": ffn_rows(cfg, X.shape[0], X.shape[1]), "sigma_M": sM, "sigma_U": sU,
            "alpha_ffn": alpha_ffn(sM, sU)}


def parameter_count(cfg: ModelConfig) -> int:
    """``p``, the number of trainable weights: ``L (2 d d_qk + d^2 + 2 d m) + d c``."""
    return cfg.L * (2 * cfg.d * cfg.d_qk + cfg.d * cfg.d + 2 * cfg.d * cfg.m) + cfg.d * cfg.c


def chain_bound(params, X, cfg) -> float:
    """Equation (ml-chain): ``sigma_Nn(H^(L)) >= b_L``, ``b_0 = sigma_Nn(X)``, ``b^Z_l = beta_attn
    b_{l-1} - ||Attn_l||_2``, ``b_l = beta_ffn b^Z_l - ||FFN_l||_2``."""
    tr = trace_no_grad(params, X, cfg)
    beta_attn, beta_ffn = cfg.residual
    b = sigma_nn(X)
    for l in range(cfg.L):
        b = beta_attn * b - spectral_norm(stacked(tr.A[l]))
        b = beta_ffn * b - spectral_norm(stacked(tr.H[l] - beta_ffn * tr.Z[l]))
    return b
