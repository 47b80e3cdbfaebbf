"""Per-FedAvg, first order (Fallah et al. 2020): a MAML-style meta-model whose one-step
adaptation on a client's data is that client's personalised model."""

from __future__ import annotations

import torch

from ..._validation import check_float, check_int
from ..base import ClientContext, payload_rows
from .base import PersonalizedAlgorithm, density


class PerFedAvg(PersonalizedAlgorithm):
    """Per-FedAvg, first-order (Fallah et al. 2020), with the step mapping of
    docs/decisions.md, section 5.

    Each sampled client, from ``w = w^t``, R meta-steps, each with two independent
    mini-batches D and D' of its TRAIN data::

        w~ = w - alpha grad l_i(w; D)
        w  = w - beta_m grad l_i(w~; D')          (first order: no Hessian term)

    with alpha = eta_p (``inner_step_size``) and beta_m = eta (``step_size``), a mapping
    fedsparse fixes (Liu et al. 2023 give only eta and eta_p). The client uploads w; its
    PM is one adaptation step of the model it received, on a third TRAIN batch:
    ``theta_i = w^t - alpha grad l_i(w^t; D'')``. The test split is never read (pFedMe's
    code adapts on a test batch). The server averages the uploads uniformly.
    """

    name = "per_fedavg"

    def __init__(self, *, step_size, inner_step_size, local_steps, batch_size):
        self.step_size = check_float("step_size", step_size, positive=True)
        self.inner_step_size = check_float("inner_step_size", inner_step_size, positive=True)
        self.local_steps = check_int("local_steps", local_steps, minimum=1)
        self.batch_size = check_int("batch_size", batch_size, minimum=1, allow_none=True)

    def hyperparameters(self):
        return {"step_size": self.step_size, "inner_step_size": self.inner_step_size,
                "local_steps": self.local_steps, "batch_size": self.batch_size}

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        problem, alpha, b = ctx.problem, self.inner_step_size, self.batch_size
        start = payload_rows(payload, ctx.size)
        w = start
        ctx.prefetch(range(2 * self.local_steps + 1), b)
        for r in range(self.local_steps):
            w_tilde = w - alpha * problem.grad(w, *ctx.batch(2 * r, b))
            w = w - self.step_size * problem.grad(w_tilde, *ctx.batch(2 * r + 1, b))
        personal = start - alpha * problem.grad(start, *ctx.batch(2 * self.local_steps, b))
        return w, self._client_state(personal), \
            {"personal_density": float(density(personal).mean())}

    def aggregate(self, state, uploads, cohort):
        rows = cohort.delivered.to(uploads.device)
        return {**state, "model": uploads[rows].mean(0)}


def per_fedavg(*, step_size: float, inner_step_size: float, local_steps: int = 20,
               batch_size: int | None = 20) -> PerFedAvg:
    """Per-FedAvg, first-order (Fallah et al. 2020): MAML-style local meta-steps
    ``w <- w - beta_m grad l(w - alpha grad l(w; D); D')``; the PM is one step
    ``w - alpha grad l(w; train batch)`` (see :class:`PerFedAvg`).

    Parameters
    ----------
    step_size : beta_m = eta, the meta step.
    inner_step_size : alpha = eta_p, the adaptation step (also the PM's).
    local_steps : R meta-steps per round.
    batch_size : examples per mini-batch (None = the full local data).
    """
    return PerFedAvg(step_size=step_size, inner_step_size=inner_step_size,
                     local_steps=local_steps, batch_size=batch_size)
