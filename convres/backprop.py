"""Backpropagation written out by hand: book equations (1)-(5) and the gradient of (5), on the rows
of a stack of ``B`` configurations (weights ``(B, p, q)``, hidden matrices ``(B, N n, q)``,
attention ``(B N, n, n)``). Book chapter *Performance*.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch

__all__ = ["Trace", "linear", "attention_logits", "attention", "softmax_rows", "coefficient", "plus_product",
           "block_rows", "forward_rows", "sequence_mask", "per_sequence", "WHOLE_ROWS", "phi_and_grad_rows",
           "trace_fields", "trace_of", "transposes", "backward_rows"]


class Trace(NamedTuple):
    """A forward pass: per block ``logits``, ``S``, ``A``, ``Z``, ``M``, ``H``; the output ``F``."""

    logits: list
    S: list
    A: list
    Z: list
    M: list
    H: list
    F: torch.Tensor

    def detach(self) -> Trace:
        """The same trace with every tensor detached from the autograd graph."""
        return Trace._make([*([t.detach() for t in field] for field in self[:6]), self.F.detach()])

    def select(self, index) -> Trace:
        """Configuration ``index`` (an int or an index tensor) of a stacked trace."""
        return Trace._make([*([t[index] for t in field] for field in self[:6]), self.F[index]])


def softmax_rows(logits):
    """``exp(G_ij - c_i) / sum_k exp(G_ik - c_i)``, ``c_i = max_k G_ik`` (book equation (1))."""
    c = logits.amax(-1, keepdim=True)
    e = (logits - (c.detach() if c.requires_grad else c)).exp_()
    return e / e.sum(-1, keepdim=True)


def linear(A: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``A W``, with ``W`` ``(p, q)``, or ``(B, p, q)`` for ``A`` of shape ``(B, ..., p)``."""
    if W.dim() == 2:
        return A @ W
    B, p, q = W.shape
    return torch.bmm(A.reshape(B, -1, p), W).reshape(*A.shape[:-1], q)


def attention_logits(X, W_Q, W_K, s: float):
    """The attention logits ``s X W_Q W_K^T X^T`` (book equation (1)), ``(..., n, n)``."""
    return s * linear(X, W_Q) @ linear(X, W_K).transpose(-1, -2)


def attention(X, W_Q, W_K, W_V, s: float):
    """``(S, A)``: ``S = softmax_rows(s X W_Q W_K^T X^T)``, ``A = S X W_V`` (book equation (1))."""
    S = softmax_rows(attention_logits(X, W_Q, W_K, s))
    return S, linear(S @ X, W_V)


def coefficient(beta):
    """A residual coefficient for a stack: a number, or a ``(B,)`` tensor as ``(B, 1, 1)``."""
    return beta.reshape(-1, 1, 1) if isinstance(beta, torch.Tensor) else beta


def plus_product(beta, C: torch.Tensor, A: torch.Tensor, B: torch.Tensor, view=None,
                 overwrite: bool = False) -> torch.Tensor:
    """``beta C + A B`` by one ``torch.baddbmm``, in place when ``beta C`` is new or ``overwrite``."""
    if isinstance(beta, torch.Tensor):
        C, beta, overwrite = beta * C, 1.0, True            # a new tensor: add A B to it
    if beta == 0:
        return torch.bmm(A, B)
    C = C if view is None else C.reshape(view)
    return C.baddbmm_(A, B, beta=beta) if overwrite else torch.baddbmm(C, A, B, beta=beta)


#: Up to this many rows ``N n``, attention is one masked ``(N n, N n)`` matrix (:func:`sequence_mask`):
#: 1.19 times as fast as ``N`` tiny products at N = 2, n = 4 (0.82-1.03 times at 16 to 64 rows).
WHOLE_ROWS = 8


def sequence_mask(N: int, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``0`` where ``i // n == j // n`` (one sequence), else ``-inf``: cached outside ``torch.func``."""
    if torch._C._functorch.peek_interpreter_stack() is not None:
        return _sequence_mask.__wrapped__(N, n, dtype, device)
    return _sequence_mask(N, n, dtype, device)


@functools.lru_cache(maxsize=32)
def _sequence_mask(N: int, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    seq = torch.arange(N * n, device=device) // n
    zero = torch.zeros((), dtype=dtype, device=device)
    return torch.where(seq[:, None] == seq[None, :], zero, -math.inf)


def per_sequence(T: torch.Tensor, N: int, n: int) -> torch.Tensor:
    """The ``(B N, n, n)`` attention matrices of :func:`block_rows`'s ``T`` (``logits`` or ``S``)."""
    if T.shape[-1] == n:
        return T
    B = T.shape[0]
    return T.view(B, N, n, N, n).diagonal(dim1=1, dim2=3).permute(0, 3, 1, 2).reshape(B * N, n, n)


def block_rows(X, W, s: float, act, beta_attn, beta_ffn, N: int):
    """One block, book equations (1)-(3), on rows ``X`` of ``N`` sequences:
    ``(logits, S, Z, M, H, Q, K, S X, P)``::

        S = softmax_rows(s Q K^T),  Z = (S X) W_V + beta_attn X,  M = act(P),  P = Z W_1,
        H = M W_2 + beta_ffn Z,  Q = X W_Q,  K = X W_K

    ``S`` is ``(B N, n, n)``, or ``(B, N n, N n)`` (:func:`sequence_mask`) up to :data:`WHOLE_ROWS` rows.
    """
    B, rows, d = X.shape
    Q, K = torch.bmm(X, W["W_Q"]), torch.bmm(X, W["W_K"])
    if N > 1 and rows <= WHOLE_ROWS:
        logits = torch.baddbmm(sequence_mask(N, rows // N, X.dtype, X.device), Q, K.mT, alpha=s)
        S = softmax_rows(logits)                                        # (1)
        SX = torch.bmm(S, X)
    else:
        heads = (B * N, rows // N, -1)
        logits = torch.bmm(Q.reshape(heads), K.reshape(heads).mT).mul_(s)
        S = softmax_rows(logits)                                        # (1)
        SX = torch.bmm(S, X.reshape(heads)).reshape(B, rows, d)
    Z = plus_product(beta_attn, X, SX, W["W_V"])                        # (2)
    P = torch.bmm(Z, W["W_1"])
    M = act(P)                                                          # (3)
    H = plus_product(beta_ffn, Z, M, W["W_2"])
    return logits, S, Z, M, H, Q, K, SX, P


def forward_rows(layers, W_U, X, s: float, act, beta_attn, beta_ffn, N: int, pooled: bool):
    """Book equations (1)-(4) on rows ``X``: ``(blocks, last, F)``, each block's input and outputs,
    the last ``H`` (averaged per sequence if ``pooled``) and ``F = last W_U``."""
    blocks = []
    for W in layers:
        blocks.append((X, block_rows(X, W, s, act, beta_attn, beta_ffn, N)))
        X = blocks[-1][1][4]
    last = X.reshape(X.shape[0], N, -1, X.shape[-1]).mean(dim=2) if pooled else X
    return blocks, last, torch.bmm(last, W_U)


def phi_and_grad_rows(layers, W_U, X, Y, s: float, act, beta_attn, beta_ffn, N: int, pooled: bool):
    """``(Phi, grads, blocks, F)``: ``Phi = 1/2 ||F - Y||^2`` (book equation (5)) and its gradient."""
    blocks, last, F = forward_rows(layers, W_U, X, s, act, beta_attn, beta_ffn, N, pooled)
    R = F - Y
    grads = backward_rows(layers, W_U, blocks, last, R, s, act, beta_attn, beta_ffn, N, pooled)
    return 0.5 * R.pow(2).sum((1, 2)), grads, blocks, F


def trace_fields(outs, W_V, lead: tuple, N: int, n: int) -> list[list[torch.Tensor]]:
    """The fields ``logits, S, A, Z, M, H`` of a trace from the :func:`block_rows` outputs ``outs``."""
    A = [torch.bmm(out[7], w) for out, w in zip(outs, W_V)]
    attention = ([per_sequence(out[i], N, n).reshape(*lead, N, n, n) for out in outs] for i in (0, 1))
    rows = (A, *([out[i] for out in outs] for i in (2, 3, 4)))
    return [*attention, *([t.reshape(*lead, N, n, -1) for t in field] for field in rows)]


def trace_of(blocks, layers, F, lead: tuple, N: int, n: int, pooled: bool) -> Trace:
    """The :class:`Trace` of :func:`forward_rows`'s ``blocks`` and ``F`` (``lead``: ``(B,)`` or ``()``)."""
    fields = trace_fields([out for _, out in blocks], [W["W_V"] for W in layers], lead, N, n)
    return Trace._make([*fields, F.reshape(*lead, N, *(() if pooled else (n,)), -1)])


def transposes(layers) -> list[dict[str, torch.Tensor]]:
    """Per block, the transposes ``W^T`` (views) of its weights ``W_Q, ..., W_2``."""
    return [{k: W.mT for k, W in Wl.items()} for Wl in layers]


def backward_rows(layers, W_U, blocks, last, R, s: float, act, beta_attn, beta_ffn,
                  N: int, pooled: bool, out: dict | None = None,
                  layers_T: list | None = None) -> dict[str, torch.Tensor]:
    """The gradient of ``Phi = 1/2 ||F - Y||^2`` (book equation (5)) by weight name, ``(B, p, q)``
    each, from :func:`forward_rows`'s ``blocks`` and ``last`` and ``R = F - Y``; for each block
    from the last to the first (``X`` its input, ``G`` its logits)::

        dW_U = H_L^T R,  dH_L = R W_U^T        (with pooling, dH_L / n at each of the n rows)
        dW_2 = M^T dH,   dP = act'(P) * (dH W_2^T),   dW_1 = Z^T dP,   dZ = dP W_1^T + beta_ffn dH
        dW_V = (S X)^T dZ,   dSX = dZ W_V^T,   dG = s S * (dS - rowsum(S * dS)),   dS = dSX X^T
        dW_Q = X^T dG K,   dW_K = X^T dG^T Q
        dX = S^T dSX + beta_attn dZ + dG K W_Q^T + dG^T Q W_K^T        (the dH of the block below)

    ``out``: tensors that receive the gradients; ``layers_T``: :func:`transposes` of ``layers``.
    """
    layers_T = layers_T or transposes(layers)
    grads = out if out is not None else {}
    grads["W_U"] = torch.bmm(last.mT, R, out=grads.get("W_U"))
    dH = torch.bmm(R, W_U.mT)
    if pooled:
        n = blocks[-1][1][4].shape[1] // N
        dH = (dH / n).repeat_interleave(n, dim=1)
    for l in range(len(blocks), 0, -1):
        (X, (_, S, Z, M, _, Q, K, SX, P)), Wt = blocks[l - 1], layers_T[l - 1]
        heads, name = (S.shape[0], S.shape[1], -1), f"layer{l}."
        whole = S.shape[0] == X.shape[0]      # one attention matrix per configuration
        grads[name + "W_2"] = torch.bmm(M.mT, dH, out=grads.get(name + "W_2"))
        dM = torch.bmm(dH, Wt["W_2"])
        dP = act.grad(P, M, dM) if act.grad else torch.func.vjp(act.fn, P)[1](dM)[0]
        grads[name + "W_1"] = torch.bmm(Z.mT, dP, out=grads.get(name + "W_1"))
        dZ = plus_product(beta_ffn, dH, dP, Wt["W_1"], overwrite=True)
        grads[name + "W_V"] = torch.bmm(SX.mT, dZ, out=grads.get(name + "W_V"))
        dSX = torch.bmm(dZ, Wt["W_V"])
        Xh, Qh, Kh, dSX = ((X, Q, K, dSX) if whole
                           else (T.reshape(heads) for T in (X, Q, K, dSX)))
        dG = torch.bmm(dSX, Xh.mT).mul_(S)                                # S * dS
        dG = dG.addcmul_(S, dG.sum(-1, keepdim=True), value=-1.0).mul_(s)
        dQ, dK = torch.bmm(dG, Kh), torch.bmm(dG.mT, Qh)
        if not whole:
            dQ, dK = dQ.reshape(Q.shape), dK.reshape(K.shape)
        XT = X.mT
        grads[name + "W_Q"] = torch.bmm(XT, dQ, out=grads.get(name + "W_Q"))
        grads[name + "W_K"] = torch.bmm(XT, dK, out=grads.get(name + "W_K"))
        if l > 1:
            dH = plus_product(beta_attn, dZ, S.mT, dSX, heads, overwrite=True)
            dH = dH.reshape(dZ.shape)
            dH = dH.baddbmm_(dQ, Wt["W_Q"]).baddbmm_(dK, Wt["W_K"])
    return grads
