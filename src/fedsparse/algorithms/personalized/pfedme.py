"""pFedMe: personalised federated learning with Moreau envelopes (Dinh et al. 2020,
Alg. 1), as Liu et al. 2023 run it beside FedMac."""

from __future__ import annotations

import torch

from ...sparsity.smooth import phi_rho_grad
from .coupled import CoupledPersonalization


class PFedMe(CoupledPersonalization):
    """pFedMe (Dinh et al. 2020, Alg. 1): the round of :class:`CoupledPersonalization`
    with these steps. For r = 0..R-1, on one mini-batch D per r, K SGD steps on the
    Moreau-envelope problem ``l_i(theta; D) + gamma phi_rho(theta) + (lambda / 2)
    ||theta - w_i||^2``

        theta <- theta - eta_p (grad l_i(theta; D) + gamma tanh(theta / rho)
                                 + lambda (theta - w_i))

    then one step on w_i:

        w_i <- w_i - eta lambda (w_i - theta)

    With ``gamma > 0`` (Liu et al. 2023's "modified pFedMe", Figure 4) the rule Z
    (:func:`fedsparse.sparsity.zero_small`) follows every theta step with the shrink size
    eta_p gamma; w_i and the server's model are never zeroed (pFedMe has no gamma_w).
    """

    name = "pfedme"

    def personal_gradient(self, theta: torch.Tensor, w: torch.Tensor, grad: torch.Tensor
                          ) -> torch.Tensor:
        """grad l_i(theta; D) + gamma tanh(theta / rho) + lambda (theta - w_i), built in
        ``grad``; every argument (S, P), or the same column block of each."""
        lam = self.lam
        if self.gamma:
            grad.add_(phi_rho_grad(theta, self.rho), alpha=self.gamma)
        return grad.add_(theta, alpha=lam).sub_(w, alpha=lam)

    def global_step(self, w: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        """w_i <- w_i - eta lambda (w_i - theta); every argument (S, P)."""
        eta_lam = self.step_size * self.lam
        return w.mul_(1 - eta_lam).add_(theta, alpha=eta_lam)


def pfedme(*, lam: float, step_size: float, personal_step_size: float,
           local_steps: int = 20, inner_steps: int = 1, batch_size: int | None = 20,
           beta: float = 1.0, gamma: float = 0.0, rho: float = 1e-3,
           clients_per_round: int | None = None, density_floor: float = 0.5,
           inner_tolerance: float | None = None) -> PFedMe:
    """pFedMe (Dinh et al. 2020, Alg. 1) with Moreau envelopes, as Liu et al. 2023 run it.

    theta_i approximately minimises ``l_i(theta) + gamma phi_rho(theta) + (lambda / 2)
    ||theta - w_i||^2`` (K SGD steps per mini-batch), then
    ``w_i <- w_i - eta lambda (w_i - theta_i)``; all clients train and the server applies
    ``w <- (1 - beta) w + beta mean_{S^t} w_i`` (see :class:`PFedMe`). The PM is theta_i
    (pFedMe's code evaluates w_i instead). ``gamma > 0`` is Liu et al.'s "modified
    pFedMe" (Figure 4), with the same zeroing rule Z on theta.

    Parameters
    ----------
    lam : lambda > 0 (the paper: 15).
    step_size : eta, the step of w_i.
    personal_step_size : eta_p, the step of theta.
    local_steps, inner_steps, batch_size, beta, clients_per_round, density_floor,
    inner_tolerance : as :func:`~fedsparse.algorithms.fedmac` (Dinh et al. 2020 also
        solve theta to an accuracy nu).
    gamma, rho : the modified pFedMe's phi_rho weight on theta (0 = pFedMe) and its
        smoothing level.
    """
    return PFedMe(lam=lam, gamma=gamma, rho=rho, step_size=step_size,
                  personal_step_size=personal_step_size, local_steps=local_steps,
                  inner_steps=inner_steps, batch_size=batch_size, beta=beta,
                  clients_per_round=clients_per_round, density_floor=density_floor,
                  inner_tolerance=inner_tolerance)
