"""SAFARI: sparse training over unreliable links (Mao et al. 2022), Algorithms 1-3.

Round t:

1. the server broadcasts x^t;
2. client i computes a mask M_i at density rho (fraction KEPT: the paper's "60% pruned"
   is ``density=0.4``) -- MAG (|x^t|) or SynFlow (Tanaka et al. 2020), both data-free and
   so the same for every client and computed once per round, or FedSpa's persistent
   per-client mask (Huang et al. 2022) -- sets ``x_{i,0} = x^t * M_i`` and runs::

       x_{i,k} = x_{i,k-1} - eta * update( (g_i(x_{i,k-1}; xi_{i,k}) + mu (x_{i,k-1} - x^t)) * M_i )

   with the mask re-applied after every optimiser step, so pruned weights stay exactly 0
   under Adam too (Alg. 2 writes g_i(x_{i,0}); a typo). mu > 0 is the FedProx aggregator
   (Li et al. 2020) with a real gradient;
3. the client uploads the sparse x_{i,tau} (``payload="model"``, the paper) as
   (index, value) -- for FedSpa masked by its updated mask -- or the update
   ``x_{i,tau} - x^t * M_i`` with the mask it trained under (``payload="update"``, what
   the public code effectively does; the global model then stays dense);
4. the server averages what arrived, renormalised over the received weights
   (``compensation=False``), or replaces every lost upload by the most similar received
   one first (:mod:`fedsparse.algorithms.compensation`, Alg. 3).

FedSpa's mask evolves after local training (cosine-annealed drop by magnitude, regrowth
by the gradient of one local batch) and is kept even when the upload is lost. The
annealing runs over the run's own T: the round loop sends it with every payload
(:attr:`~fedsparse.algorithms.ClientContext.total_rounds`), so the algorithm has no
``rounds`` of its own that could disagree with the run's.
"""

from __future__ import annotations

import torch

from .._resources import check_steps
from .._validation import check_bool, check_choice, check_float, check_int, fail
from ..sparsity.masks import (
    SCOPES,
    fedspa_update,
    magnitude_mask,
    random_masks,
    synflow_mask,
)
from .base import Algorithm, ClientContext, payload_view, weighted_mean
from .compensation import similarity_compensation
from .local import LocalOptimizer, local_train

PRUNERS = ("magnitude", "synflow", "fedspa")
AGGREGATORS = ("fed_avg", "fed_prox")
PAYLOADS = ("model", "update")


class SparseTraining(Algorithm):
    """Masked local training with sparse uploads (see the module docstring)."""

    name = "safari"
    client_metrics = ("mask_density",)
    upload_encoding = "sparse"
    broadcast_encoding = "auto"

    def __init__(self, *, pruner, density, step_size, local_steps, batch_size, optimizer,
                 aggregator, mu, payload, scope, synflow_iterations, alpha0,
                 mask_distribution):
        self.pruner = check_choice("pruner", pruner, PRUNERS)
        density = check_float("density", density, positive=True)
        if density > 1:
            raise fail("density", density, "must lie in (0, 1]: the fraction of weights kept "
                       "(the paper's '60% pruned' is density=0.4)")
        self.density = density
        self.local = LocalOptimizer.checked(step_size=step_size, local_steps=local_steps,
                                            batch_size=batch_size, optimizer=optimizer)
        self.aggregator = check_choice("aggregator", aggregator, AGGREGATORS)
        self.mu = check_float("mu", mu, nonnegative=True)
        if aggregator == "fed_prox" and self.mu == 0:
            raise fail("mu", mu, 'must be positive with aggregator="fed_prox"')
        if aggregator == "fed_avg":
            self.mu = 0.0
        self.payload = check_choice("payload", payload, PAYLOADS)
        self.uploads_are_updates = self.payload == "update"
        self.scope = check_choice("scope", scope, SCOPES)
        self.synflow_iterations = check_int("synflow_iterations", synflow_iterations,
                                            minimum=1)
        check_steps(local_steps=self.local.local_steps)
        if self.pruner == "synflow":
            check_steps(synflow_iterations=self.synflow_iterations)
        self.alpha0 = check_float("alpha0", alpha0, nonnegative=True, maximum=1.0)
        self.mask_distribution = check_choice("mask_distribution", mask_distribution,
                                              ("erk", "uniform"))
        self.stateful_clients = self.pruner == "fedspa"

    def hyperparameters(self):
        out = {"pruner": self.pruner, "density": self.density, **self.local.hyperparameters(),
               "aggregator": self.aggregator, "payload": self.payload, "scope": self.scope}
        if self.aggregator == "fed_prox":
            out["mu"] = self.mu
        if self.pruner == "synflow":
            out["synflow_iterations"] = self.synflow_iterations
        if self.pruner == "fedspa":
            out.update(alpha0=self.alpha0, mask_distribution=self.mask_distribution)
        return out

    def sequential_steps(self):
        scoring = self.synflow_iterations if self.pruner == "synflow" else 0
        return self.local.local_steps + scoring

    def _bind(self, problem, spec, stats):
        if self.pruner == "synflow" and "neural" not in problem.capabilities:
            raise fail("pruner", "synflow", f"scores the paths of a network; {problem.name} "
                       "has none (use pruner='magnitude')")
        self.layout = problem.layout(spec.dim)  # the prunable tensors of the model

    def init_clients(self, problem, clients, seed=0):
        if self.pruner != "fedspa":
            return None
        return {"mask": random_masks(self.layout, self.density, clients, seed,
                                     self.mask_distribution)}

    def _shared_mask(self, problem, x: torch.Tensor) -> torch.Tensor:
        if self.pruner == "magnitude":
            return magnitude_mask(self.layout, x, self.density, self.scope)
        return synflow_mask(problem, x, self.density, self.synflow_iterations, self.scope)

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        x0 = payload_view(payload, ctx.size)  # read only: local_train trains a copy
        if self.pruner == "fedspa":
            mask = ctx.state["mask"].to(x0.device)
        else:  # data-free and scored on the shared x^t: one mask for every client
            shared = payload if payload.ndim == 1 else payload[0]
            mask = self._shared_mask(ctx.problem, shared).to(x0.device).expand(ctx.size, -1)
        x = local_train(self.local, x0, ctx, mu=self.mu, anchor=payload, mask=mask)
        # The update form is the training step itself: x_{i,tau} - x^t * M_i, with the
        # mask the client trained under (a mask FedSpa changes afterwards moves nothing).
        upload = x - x0 * mask.to(x.dtype) if self.payload == "update" else x
        new_state = None
        if self.pruner == "fedspa":
            X, y, w = ctx.batch(self.local.local_steps, self.local.batch_size)
            grad = ctx.problem.grad(x, X, y, w)
            mask = fedspa_update(mask, x, grad, self.layout, ctx.round, ctx.total_rounds,
                                 self.alpha0)
            new_state = {"mask": mask}
            if self.payload == "model":
                upload = x * mask.to(x.dtype)
        density = float(mask.to(torch.float64).mean())
        return upload, new_state, {"mask_density": density}

    def aggregate(self, state, uploads, cohort):
        mean = weighted_mean(uploads, cohort)
        model = mean if self.payload == "model" else state["model"] + mean
        return {**state, "model": model}


def safari(*, density: float, pruner: str = "magnitude", step_size: float = 1e-3,
           local_steps: int = 5, batch_size: int | None = 64, optimizer: str = "adam",
           aggregator: str = "fed_avg", mu: float = 0.001, compensation: bool = True,
           payload: str = "model", scope: str = "layer", synflow_iterations: int = 100,
           alpha0: float = 0.5, mask_distribution: str = "erk") -> Algorithm:
    """SAFARI (Mao et al. 2022): masked sparse training, sparse uploads, and similarity
    compensation of lost uploads (see :mod:`fedsparse.algorithms.safari`).

    Parameters
    ----------
    density : fraction of prunable weights KEPT, in (0, 1] (the paper's alpha = 0.6
        pruned is ``density=0.4``).
    pruner : "magnitude" (MAG), "synflow" or "fedspa".
    step_size, local_steps, batch_size, optimizer : local training (the paper: Adam,
        lr 1e-3, tau = 5 steps, batch 64; Adam's moments are fresh each round).
    aggregator : "fed_avg" or "fed_prox" (adds ``mu (x - x^t)`` to the local gradient).
    mu : FedProx's weight (0.001, the public code's value; the paper gives none).
    compensation : wrap with :func:`~fedsparse.algorithms.similarity_compensation`.
    payload : "model" (sparse models are averaged; the paper) or "update".
    scope : masks keep ``ceil(density * count)`` entries per "layer" or "global"ly.
    synflow_iterations : SynFlow's scoring passes (100, Tanaka et al.; the code uses 1).
    alpha0 : FedSpa's initial drop fraction; it is annealed to 0 over the run's rounds T
        (the run's own, sent to the clients by the round loop).
    mask_distribution : FedSpa's initial per-layer densities, "erk" or "uniform".
    """
    algo = SparseTraining(pruner=pruner, density=density, step_size=step_size,
                          local_steps=local_steps, batch_size=batch_size, optimizer=optimizer,
                          aggregator=aggregator, mu=mu, payload=payload, scope=scope,
                          synflow_iterations=synflow_iterations, alpha0=alpha0,
                          mask_distribution=mask_distribution)
    return similarity_compensation(algo) if check_bool("compensation", compensation) else algo
