"""FedMac: sparse personalised federated learning by maximising the correlation between
each client's personalised model and the global model (Liu et al. 2023, Alg. 1)."""

from __future__ import annotations

import torch

from ..._validation import check_float
from ...sparsity.smooth import phi_rho_grad, zero_small
from .coupled import CoupledPersonalization


class FedMac(CoupledPersonalization):
    """FedMac (Liu et al. 2023, Alg. 1): the round of :class:`CoupledPersonalization`
    with these steps. For r = 0..R-1, on one mini-batch D per r, K steps on eq. (9)'s
    ``H~_i(theta; w_i, D) = l~_i(theta; D) + gamma phi_rho(theta) - lambda <theta, w_i>``

        theta <- theta - eta_p (grad l_i(theta; D) + gamma tanh(theta / rho)
                                 - lambda w_i)                                  (eq. 9)

    then one step on w_i:

        w_i <- w_i - eta (lambda (w_i - theta) + gamma_w tanh(w_i / rho))        (eq. 6)

    After every theta step with gamma > 0 and every w step with gamma_w > 0 the rule Z
    (:func:`fedsparse.sparsity.zero_small`) zeroes entries below the step's shrink size
    (eta_p gamma, eta gamma_w), keeping at least ``density_floor`` of the entries
    non-zero. The server applies Z with eta gamma_w to its beta-mix of S^t as well, so
    both the upload and the broadcast carry Z-applied models.
    """

    name = "fedmac"

    def __init__(self, *, gamma_w, **coupled):
        super().__init__(**coupled)
        self.gamma_w = check_float("gamma_w", gamma_w, nonnegative=True)

    def hyperparameters(self):
        out = super().hyperparameters()
        return {"lam": out.pop("lam"), "gamma": out.pop("gamma"), "gamma_w": self.gamma_w,
                **out}

    def personal_gradient(self, theta: torch.Tensor, w: torch.Tensor, grad: torch.Tensor
                          ) -> torch.Tensor:
        """Eq. (9)'s gradient grad H~_i = grad l_i(theta; D) + gamma tanh(theta / rho)
        - lambda w_i, built in ``grad``; every argument (S, P), or the same column block
        of each."""
        if self.gamma:
            grad.add_(phi_rho_grad(theta, self.rho), alpha=self.gamma)
        return grad.sub_(w, alpha=self.lam)

    def global_step(self, w: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        """Eq. (6): w_i <- Z(w_i - eta (lambda (w_i - theta) + gamma_w tanh(w_i / rho)));
        every argument (S, P)."""
        eta, lam = self.step_size, self.lam
        shrink = phi_rho_grad(w, self.rho) if self.gamma_w else None  # at w_i before the step
        w.mul_(1 - eta * lam).add_(theta, alpha=eta * lam)
        if shrink is not None:
            w.sub_(shrink, alpha=eta * self.gamma_w)
        return zero_small(w, eta * self.gamma_w, floor=self.density_floor)

    def server_step(self, model: torch.Tensor) -> torch.Tensor:
        """Z with the w step's shrink size eta gamma_w on the (P,) beta-mix."""
        return zero_small(model, self.step_size * self.gamma_w, floor=self.density_floor)


def fedmac(*, lam: float, step_size: float, personal_step_size: float, gamma: float = 0.0,
           gamma_w: float = 0.0, rho: float = 1e-3, local_steps: int = 20,
           inner_steps: int = 1, batch_size: int | None = 20, beta: float = 1.0,
           clients_per_round: int | None = None, density_floor: float = 0.5,
           inner_tolerance: float | None = None) -> FedMac:
    """FedMac: sparse personalised FL by maximising correlation (Liu et al. 2023, Alg. 1).

    Client i's PM theta_i minimises ``H_i(theta; w) = l_i(theta) + gamma phi_rho(theta)
    - lambda <theta, w>`` and its copy of the global model follows
    ``grad F_i(w) = lambda (w - theta(w)) + gamma_w tanh(w / rho)`` (eq. 6), with the
    smoothed l1 norm ``phi_rho(x) = rho sum log cosh(x / rho)``; see :class:`FedMac` for
    the steps and the zeroing rule Z, and
    :class:`~fedsparse.algorithms.personalized.CoupledPersonalization` for the round and
    the records.

    Parameters
    ----------
    lam : lambda > 0, the correlation weight (the paper: 1e-4).
    step_size : eta, the step of w (the paper: 3000 with lambda = 1e-4, so eta lambda
        = 0.3).
    personal_step_size : eta_p, the step of theta.
    gamma, gamma_w : weights of phi_rho on theta and on w (>= 0; 0 = no sparsity term).
    rho : smoothing level of phi_rho (> 0); steps are stable while eta_p gamma / rho < 2.
    local_steps : R, the w steps per round (one mini-batch each).
    inner_steps : K, theta steps per w step on the same mini-batch (1 in the paper's
        experiments); with ``inner_tolerance``, the most steps taken.
    inner_tolerance : nu (None = K steps): a client's theta steps stop once
        ``||grad H~_i(theta; w_i, D)||^2 <= nu`` (the paper's criterion after eq. 9),
        after at most K of them.
    batch_size : |D| examples per mini-batch (None = the full local data).
    beta : server mix in (0, 2]: ``w <- (1 - beta) w + beta mean_{S^t} w_i``.
    clients_per_round : S, the uploads averaged each round (None = all); every client
        trains every round (do not give ``simulate`` a ``clients_per_round``).
    density_floor : fraction of entries rule Z keeps non-zero (the paper: 50%).
    """
    return FedMac(lam=lam, gamma=gamma, gamma_w=gamma_w, rho=rho, step_size=step_size,
                  personal_step_size=personal_step_size, local_steps=local_steps,
                  inner_steps=inner_steps, batch_size=batch_size, beta=beta,
                  clients_per_round=clients_per_round, density_floor=density_floor,
                  inner_tolerance=inner_tolerance)
