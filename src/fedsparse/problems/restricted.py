"""Minimising a client's loss over a few coordinates: the ``restricted_solve`` capability.

FedGradMP (Jeong et al. 2024, Alg. 1, step ``b = argmin f_i(x), x in R(A_Gamma_hat)``) solves, on
every client at once, a small problem over at most ``3 tau`` coordinates (or atoms). A
restricted problem is described by

* ``index`` (S, k) int64 positions in the flat parameter vector (padded),
* ``valid`` (S, k) bool, False on padding (clients whose support is smaller than k),

and, after :meth:`~fedsparse.problems.linear.LinearProblem.restricted_features`, by
restricted features ``Z`` (S, n, k) (column q of client s is the feature that multiplies
parameter ``index[s, q]``) and the class row ``cls`` (S, k) each parameter belongs to
(always 0 for a single linear score).
Padding columns of ``Z`` are zero, so they never touch the loss; the solvers keep their
coefficients at exactly 0.

Every loss, gradient and Hessian below is built from the problem's per-example link
(:mod:`fedsparse.problems.links`): the solvers do not know which loss they minimise.

Solvers (all batched over the S clients, no Python loop over clients):

* ``exact`` — a quadratic link without l2 (least squares): weighted linear least
  squares, Cholesky on the normal equations plus one refinement step, falling back per
  client to LAPACK ``gelsd`` (SVD, minimum-norm) when the Gram matrix is singular or
  ill-conditioned; any other link: damped Newton to 1e-10.
* ``newton`` — damped Newton with a backtracking (Armijo) line search, until a step
  relative to the coefficients is at most ``tol`` or the dtype's resolution (float32's
  1.2e-7), whichever is larger.
* ``gd`` — gradient descent with step ``1 / L_restricted`` (L by power iteration on the
  restricted Hessian bound) until the step is at most ``tol`` (Jeong et al. 2024, Sec. IV-A).

Stochastic inner steps (Alg. 2's "fixed number of SGD steps") need mini-batches, so the
algorithm drives them with :func:`restricted_loss_grad` on its own batches.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .._linalg import lstsq_gelsd, solve_or_lstsq
from .._validation import check_choice

METHODS = ("exact", "newton", "gd")


def mask_to_index(mask: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of the True entries of each row, padded to ``k`` columns.

    Parameters
    ----------
    mask : (S, P) bool, at most ``k`` True entries per row.
    k : number of columns of the result.

    Returns
    -------
    index : (S, k) int64, the True positions in ascending order, then padding positions.
    valid : (S, k) bool, False on padding.
    """
    if mask.device.type == "cpu" and mask.dtype == torch.bool and mask.ndim == 2 \
            and 0 < k <= mask.shape[-1]:
        return _mask_to_index_numpy(mask, k)
    # A stable sort on "not selected" puts the selected positions first, in index order.
    order = torch.sort((~mask).to(torch.int8), dim=-1, stable=True).indices[..., :k]
    return order, torch.gather(mask, -1, order)


def _mask_to_index_numpy(mask: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`mask_to_index` on the CPU without the sort: the same positions.

    FedGradMP calls it at every local step on (S, P) masks with at most ``k`` True
    entries per row; the stable sort of the S x P flags costs several times more than
    reading the True positions off ``flatnonzero`` (30 x 1000: about 160 us against
    30 us). The padding the sort gives is a row's first ``k - count`` False positions,
    which all lie among its first ``k`` columns (those hold at least ``k - count``
    False entries).
    """
    m = mask.numpy()
    S, P = m.shape
    row, col = np.divmod(np.flatnonzero(m), P)      # True positions, row by row, ascending
    count = np.bincount(row, minlength=S)
    rank = np.arange(row.size) - (np.cumsum(count) - count)[row]
    keep = rank < k                                   # more than k: the first k, as the sort
    out = np.empty((S, k), dtype=np.int64)
    out[row[keep], rank[keep]] = col[keep]
    free = ~m[:, :k]
    slot = np.cumsum(free, axis=1) + (count[:, None] - 1)  # where each False one would go
    pad = np.flatnonzero(free & (slot < k))
    out[pad // k, slot.reshape(-1)[pad]] = pad % k
    return torch.from_numpy(out), torch.from_numpy(np.arange(k) < count[:, None])


def _scores(problem, c: torch.Tensor, Z: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
    """Linear scores: (S, n) for one class row, (S, n, C) logits of C class rows."""
    if problem.blocks == 1:
        return torch.bmm(Z, c.unsqueeze(-1)).squeeze(-1)
    onehot = F.one_hot(cls, problem.blocks).to(Z.dtype)          # (S, k, C)
    return torch.bmm(Z * c.unsqueeze(1), onehot)                   # (S, n, C)


def _per_param(scores: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
    """(S, n, k): each parameter's column of the per-class values (S, n, C)."""
    return torch.gather(scores, -1, cls.unsqueeze(1).expand(-1, scores.shape[1], -1))


def _penalty(problem, c, metric):
    l2 = problem.l2()
    if not l2:
        return 0.0, 0.0
    Mc = c if metric is None else torch.bmm(metric, c.unsqueeze(-1)).squeeze(-1)
    return 0.5 * l2 * (c * Mc).sum(-1), l2 * Mc


def restricted_loss_grad(problem, c: torch.Tensor, Z: torch.Tensor, cls: torch.Tensor,
                         y: torch.Tensor, w: torch.Tensor, metric: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss (S,) and gradient (S, k) of the restricted problem at coefficients ``c`` (S, k).

    The loss is ``sum_n w_n l(s_n, y_n)`` for the scores ``s`` of the restricted model and
    the problem's link ``l``; its gradient ``d/dc_q = sum_n w_n l'(s_n)_{cls_q} Z_nq``.
    ``metric`` (S, k, k) is the Gram matrix of the restricted directions for the l2 term
    ``(l2/2) ||x||^2 = (l2/2) c^T M c`` (None = identity: plain coordinates).
    """
    link = problem.link
    s = _scores(problem, c, Z, cls)
    loss = link.total(s, y, w)
    coef = link.derivative(s, y, w)                     # (S, n) or (S, n, C)
    if problem.blocks == 1:
        grad = torch.bmm(coef.unsqueeze(1), Z).squeeze(1)
    else:
        grad = (_per_param(coef, cls) * Z).sum(1)
    pen, pen_grad = _penalty(problem, c, metric)
    return loss + pen, grad + pen_grad


def restricted_hessian(problem, c, Z, cls, y, w, metric=None) -> torch.Tensor:
    """(S, k, k) Hessian of the restricted problem at ``c`` (see :func:`restricted_loss_grad`).

    One score: ``Z^T diag(w l'') Z``. C classes, ``l'' = diag(p) - p p^T``:
    ``H_qq' = sum_n w_n Z_nq Z_nq' (p_n,r [r = r'] - p_n,r p_n,r')``, r = cls_q, r' = cls_q'.
    """
    link = problem.link
    s = _scores(problem, c, Z, cls)
    if problem.blocks == 1:
        H = torch.bmm(Z.transpose(1, 2) * link.curvature(s, y, w).unsqueeze(1), Z)
    else:
        P = _per_param(link.curvature(s, y), cls)                    # (S, n, k)
        ZP = Z * P
        same = (cls.unsqueeze(-1) == cls.unsqueeze(-2)).to(Z.dtype)
        H = torch.bmm(ZP.transpose(1, 2) * w.unsqueeze(1), Z) * same \
            - torch.bmm(ZP.transpose(1, 2) * w.unsqueeze(1), ZP)
    l2 = problem.l2()
    if l2:
        if metric is None:
            H = H + l2 * torch.eye(H.shape[-1], dtype=H.dtype, device=H.device)
        else:
            H = H + l2 * metric
    return H


def _lstsq_exact(Z, y, w, valid):
    """Weighted least squares on the restricted columns, every client at once.

    Fast path: Cholesky on the normal equations (padding columns get a unit diagonal, so
    their coefficient is 0) followed by one step of iterative refinement with the
    residual computed from ``Z`` itself, which recovers the accuracy the normal
    equations lose to squaring the condition number. Clients whose Gram matrix is
    singular or too ill-conditioned for that (e.g. fewer examples than columns) fall back
    to LAPACK ``gelsd`` (SVD based, minimum-norm solution): no ridge is ever added.
    """
    vm = valid.to(Z.dtype)
    sw = w.clamp(min=0).sqrt()
    Zw = Z * sw.unsqueeze(-1) * vm.unsqueeze(1)
    yw = (sw * y).unsqueeze(-1)
    G = Zw.transpose(1, 2) @ Zw + torch.diag_embed(1 - vm)
    L, info = torch.linalg.cholesky_ex(G)
    diag = L.diagonal(dim1=-2, dim2=-1)
    ratio = (diag.amin(-1) / diag.amax(-1).clamp(min=1e-300)) ** 2
    # cond(G) ~ 1/ratio; beyond ~1e10 one refinement step no longer reaches full accuracy.
    ok = (info == 0) & (ratio > 1e-10)
    if bool(ok.all()):
        # The usual case: every client on the fast path, no copies of the well-posed rows.
        return _refined_cholesky(L, Zw, yw).squeeze(-1) * vm
    sol = torch.zeros(Z.shape[0], Z.shape[-1], dtype=Z.dtype, device=Z.device)
    if ok.any():
        sol[ok] = _refined_cholesky(L[ok], Zw[ok], yw[ok]).squeeze(-1)
    bad = ~ok
    sol[bad] = lstsq_gelsd(Zw[bad], yw[bad]).squeeze(-1)
    return sol * vm


def _refined_cholesky(L, Zw, yw):
    """The normal equations' solution by the Cholesky factor ``L``, plus one refinement
    step with the residual of ``Zw`` itself."""
    x = torch.cholesky_solve(Zw.transpose(1, 2) @ yw, L)
    return x + torch.cholesky_solve(Zw.transpose(1, 2) @ (yw - Zw @ x), L)


def _newton(problem, c, Z, cls, y, w, valid, metric, tol, max_iter):
    vmask = valid.to(Z.dtype)
    # a step below the dtype's resolution of the coefficients changes none of them: a
    # separable float32 client would otherwise run out max_iter once its loss stops falling
    tol = max(tol, torch.finfo(Z.dtype).eps)
    eye = torch.eye(c.shape[-1], dtype=Z.dtype, device=Z.device)
    iters = torch.zeros(c.shape[0], dtype=torch.int64, device=Z.device)
    active = torch.ones(c.shape[0], dtype=torch.bool, device=Z.device)
    loss, grad = restricted_loss_grad(problem, c, Z, cls, y, w, metric)
    for _ in range(max_iter):
        grad = grad * vmask
        H = restricted_hessian(problem, c, Z, cls, y, w, metric)
        H = H * (vmask.unsqueeze(-1) * vmask.unsqueeze(-2))
        # Padding gets a unit diagonal (so its step is 0); a tiny relative ridge keeps
        # the softmax Hessian (singular along "add the same vector to every class")
        # invertible without changing the well-posed directions measurably.
        scale = H.diagonal(dim1=-2, dim2=-1).abs().amax(-1).clamp(min=1.0)
        H = H + torch.diag_embed(1 - vmask) + (1e-12 * scale)[:, None, None] * eye
        step = -solve_or_lstsq(H, grad)
        decrement = -(grad * step).sum(-1)          # Newton decrement squared
        t = torch.ones_like(loss)
        new_c = c + step
        new_loss, new_grad = restricted_loss_grad(problem, new_c, Z, cls, y, w, metric)
        for _ls in range(40):
            bad = active & ~(new_loss <= loss - 0.25 * t * decrement + 1e-15 * loss.abs())
            if not bad.any():
                break
            t = torch.where(bad, 0.5 * t, t)
            new_c = c + t.unsqueeze(-1) * step
            new_loss, new_grad = restricted_loss_grad(problem, new_c, Z, cls, y, w, metric)
        keep = active.unsqueeze(-1)
        c = torch.where(keep, new_c, c)
        loss = torch.where(active, new_loss, loss)
        grad = torch.where(keep, new_grad, grad)
        iters = iters + active.to(torch.int64)
        step_norm = t * torch.linalg.vector_norm(step, dim=-1)
        active = active & (step_norm > tol * (1 + torch.linalg.vector_norm(c, dim=-1))) \
            & (decrement > 0)
        if not active.any():
            break
    return c * vmask, iters


def _power(Z, w, valid, iterations=30):
    v = valid.to(Z.dtype) + 0.0
    v = v / torch.linalg.vector_norm(v, dim=-1, keepdim=True).clamp(min=1e-300)
    lam = torch.zeros(Z.shape[0], dtype=Z.dtype, device=Z.device)
    for _ in range(iterations):
        zv = torch.bmm(Z, v.unsqueeze(-1)).squeeze(-1) * w
        mv = torch.bmm(zv.unsqueeze(1), Z).squeeze(1)
        lam = torch.linalg.vector_norm(mv, dim=-1)
        v = mv / lam.clamp(min=1e-300).unsqueeze(-1)
    return lam


def restricted_lipschitz(problem, Z, w, valid, metric) -> torch.Tensor:
    """(S,) smoothness bound of each client's restricted loss.

    ``1.05 * curvature_scale * lambda_max(Z^T diag(w) Z) + l2 * ||metric||_2``, where
    ``metric`` (S, k, k) is the l2 penalty's matrix on the coefficients (None: identity).
    The factor 1.05 covers power iteration approaching lambda_max from below.
    """
    L = 1.05 * problem.curvature_scale() * _power(Z, w, valid)
    if problem.l2():
        mnorm = 1.0 if metric is None else torch.linalg.matrix_norm(metric, ord=2)
        L = L + problem.l2() * mnorm
    return L


def _gd(problem, c, Z, cls, y, w, valid, metric, tol, max_iter):
    vmask = valid.to(Z.dtype)
    step = 1.0 / restricted_lipschitz(problem, Z, w, valid, metric).clamp(min=1e-300)
    iters = torch.zeros(c.shape[0], dtype=torch.int64, device=Z.device)
    active = torch.ones(c.shape[0], dtype=torch.bool, device=Z.device)
    for _ in range(max_iter):
        _, grad = restricted_loss_grad(problem, c, Z, cls, y, w, metric)
        delta = -step.unsqueeze(-1) * grad * vmask
        delta = torch.where(active.unsqueeze(-1), delta, torch.zeros_like(delta))
        c = c + delta
        iters = iters + active.to(torch.int64)
        active = active & (torch.linalg.vector_norm(delta, dim=-1) > tol)
        if not active.any():
            break
    return c * vmask, iters


def solve_restricted(problem, index: torch.Tensor, valid: torch.Tensor, X: torch.Tensor,
                     y: torch.Tensor, w: torch.Tensor, init: torch.Tensor | None = None, *,
                     method: str = "exact", tol: float = 1e-10, max_iter: int = 100
                     ) -> tuple[torch.Tensor, dict]:
    """Shared implementation of :meth:`Problem.restricted_solve` (see that method)."""
    check_choice("method", method, METHODS)
    Z, cls = problem.restricted_features(index, X)
    Z = Z * valid.unsqueeze(1).to(Z.dtype)
    metric = problem.restricted_metric(index, valid)
    S, k = index.shape
    c0 = torch.zeros(S, k, dtype=X.dtype, device=Z.device) if init is None \
        else init.to(X.dtype) * valid
    if method == "exact" and problem.link.quadratic and not problem.l2():
        coef = _lstsq_exact(Z, y, w, valid)
        return coef, {"inner_iterations": 1.0}
    if method in ("exact", "newton"):
        coef, iters = _newton(problem, c0, Z, cls, y, w, valid, metric,
                              tol if method == "newton" else min(tol, 1e-10), max_iter)
    else:
        coef, iters = _gd(problem, c0, Z, cls, y, w, valid, metric, tol, max_iter)
    return coef, {"inner_iterations": float(iters.to(torch.float64).mean())}
