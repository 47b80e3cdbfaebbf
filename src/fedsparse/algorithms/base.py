"""The Algorithm interface: pure server and client halves over explicit state.

A run binds the algorithm first (``algo = algo.bind(problem, spec, stats)``), then a
round is::

    payload = algo.broadcast(state, clients)                         # server -> clients
    uploads, client_state, info = algo.client_update(payload, ctx)   # all sampled clients at once
    state = algo.aggregate(state, uploads, cohort)                   # server

``ctx`` (a :class:`ClientContext`) gives the client half the data of the sampled
clients, stacked along a leading axis S, and their mini-batches, drawn from
counter-based random numbers so the result does not depend on how clients are
grouped. Nothing is mutated in place: each call returns new state. :mod:`fedsparse.rounds`
holds the one round loop that the simulator and the Flower server share.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

import torch

from .._validation import ConfigError, check_float, fail
from ..data.federated import ClientSplit, FederatedDataset
from ..problems.base import Problem
from .context import ClientContext, Cohort, DataSpec, ServerState

# The round's context objects are defined in .context; importable from here as well.
__all__ = ["ROUND_METHODS", "Algorithm", "ClientContext", "Cohort", "DataSpec", "ServerState",
           "check_step_size", "lipschitz_statistics", "payload_rows", "requires_bound",
           "resolve_step_size", "weighted_mean"]


#: The methods of a round; on an unbound algorithm each refuses with a clear error.
ROUND_METHODS = ("init", "init_clients", "broadcast", "client_config", "client_update",
                 "aggregate", "model", "round_metrics", "personalized")


def requires_bound(method):
    """Make ``method`` refuse to run on an unbound algorithm (see :class:`Algorithm`)."""
    if getattr(method, "requires_bound", False):
        return method

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        if "spec" not in self.__dict__:
            raise ConfigError(
                f"{self.name}.{method.__name__}() needs a bound algorithm: call "
                f"algorithm = algorithm.bind(problem, data) first (fs.simulate does this for "
                "you). Unbound, it does not know the problem's class rows, masks or "
                "dictionary, and would compute something else")
        return method(self, *args, **kwargs)

    checked.requires_bound = True
    return checked


class Algorithm:
    """Base class of every federated algorithm.

    Subclasses set :attr:`name`, :attr:`requires` (problem capabilities),
    :attr:`upload_encoding` and implement the client and server halves. A builder
    returns an unbound algorithm (hyper-parameters only); :meth:`bind` returns a copy
    with everything derived from the problem and the data spec, and only a bound
    algorithm runs: every round method (:data:`ROUND_METHODS`, in this class and in
    every subclass, wrapped when the subclass is defined) and every method decorated with
    :func:`requires_bound` refuses with a clear error on an unbound algorithm. Nothing
    derived from the problem has a default that could stand in for the bound value. The
    simulator and the Flower runtime bind the same way, with the same per-client
    statistics (:meth:`statistics`), so they run the same algorithm.

    What the round methods return is checked where the round receives it, by types and
    shapes only: a result of another form than documented here (e.g. a server state
    without its (P,) model, a broadcast of more rows than sampled clients, a diagnostic
    that is not a number) is a :class:`~fedsparse.ConfigError` naming the method, not a
    traceback from inside torch. A run with a checkpoint also needs a server state that
    the checkpoint can hold: tensors, numbers, strings, None and lists or dicts of them
    with number or string keys (checked after :meth:`init` and before every save).
    """

    name = "algorithm"
    requires: frozenset[str] = frozenset({"grad"})
    #: How uploads travel: "dense", "sparse", "bitmap" or "auto" (see fedsparse.comm).
    upload_encoding = "dense"
    broadcast_encoding = "sparse"
    #: True if the algorithm keeps per-client state between rounds.
    stateful_clients = False
    #: True if uploads are models (or model deltas) in the space of the broadcast, so that
    #: distances between uploads mean something (similarity compensation needs this).
    uploads_are_models = True
    #: True if an upload is the change from what the client was sent (a delta), not its
    #: new model: ``max_update_norm`` / ``max_update_ratio`` then bound its own norm.
    uploads_are_updates = False
    #: Cohort size the algorithm asks for (None = all clients); ``simulate`` uses it when
    #: it is not given its own ``clients_per_round``.
    clients_per_round: int | None = None
    #: Names of the diagnostics in ``client_update``'s ``info`` that the round record keeps
    #: (their mean over the clients); any other name is not recorded (with a warning), and
    #: none may be a field the server records (``fedsparse.rounds.SERVER_FIELDS``).
    client_metrics: tuple[str, ...] = ()
    #: Names of the scalars :meth:`round_metrics` returns (what a config may plot; a plot
    #: of a name no run declares is refused before the runs).
    round_metric_names: tuple[str, ...] = ()
    #: Set by :meth:`bind` (and only there: an unbound algorithm has no spec).
    spec: DataSpec

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ROUND_METHODS:
            if name in cls.__dict__:
                setattr(cls, name, requires_bound(cls.__dict__[name]))

    @property
    def is_bound(self) -> bool:
        """True for the copy :meth:`bind` returns."""
        return "spec" in self.__dict__

    def sequential_steps(self) -> int:
        """A lower bound on the sequential local steps of one round (each at least one torch
        operation), for the up-front check that a run can end: by default the product of
        the ``local_steps`` and ``inner_steps`` hyper-parameters that exist."""
        hp = self.hyperparameters()
        return math.prod(int(hp[k]) for k in ("local_steps", "inner_steps")
                         if isinstance(hp.get(k), int) and not isinstance(hp.get(k), bool))

    def state_bytes(self, num_clients: int, model_size: int, itemsize: int) -> dict[str, int]:
        """{what: bytes} of the server state the algorithm keeps beyond the model (a lower
        bound, for the up-front memory check); none by default. Client state
        (:meth:`init_clients`) is not counted: the client store keeps it in memory only
        while it fits a budget, and on disk beyond (:mod:`fedsparse.client_store`)."""
        return {}

    def hyperparameters(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this algorithm (recorded with each run)."""
        return {}

    # -- binding ------------------------------------------------------------------------
    def statistics(self, problem: Problem, split: ClientSplit) -> dict[str, torch.Tensor]:
        """Per-client statistics :meth:`bind` needs, computed where the data lives.

        Returns a dict of (S,) tensors for the S clients of ``split`` (empty by default).
        The simulator computes them on all clients at once; on Flower each node computes
        its own and sends them in the handshake.
        """
        return {}

    def bind(self, problem: Problem, spec: DataSpec | FederatedDataset,
             stats: dict[str, torch.Tensor] | None = None) -> Algorithm:
        """A copy of this algorithm bound to ``problem`` and ``spec``.

        Raises a clear error if the algorithm cannot run on them. ``stats`` are the
        per-client statistics of :meth:`statistics` for all N clients (on the server);
        clients bind without them. Given a whole :class:`FederatedDataset` instead of a
        spec, the spec and the statistics are taken from it (what ``simulate`` does).
        """
        if isinstance(spec, FederatedDataset):
            stats = self.statistics(problem, spec.train) if stats is None else stats
            spec = DataSpec.of(spec)
        missing = set(self.requires) - set(problem.capabilities)
        if missing:
            raise ConfigError(f"{self.name} needs the problem capabilities {sorted(missing)}, "
                              f"which {problem.name} does not provide")
        bound = copy.copy(self)
        bound.spec = spec
        bound._bind(problem, spec, stats or {})
        return bound

    def _bind(self, problem: Problem, spec: DataSpec, stats: dict) -> None:
        """Derive what the algorithm needs from (problem, spec, stats); set it on ``self``
        (a fresh copy made by :meth:`bind`)."""

    def _require_bound(self) -> DataSpec:
        if not self.is_bound:
            raise ConfigError(f"{self.name} is not bound: call algorithm.bind(problem, spec) "
                              "first (fs.simulate does this for you)")
        return self.spec

    # -- server half ----------------------------------------------------------------------
    def init(self, problem: Problem, seed: int = 0) -> ServerState:
        """Initial server state: a dict holding the problem's initial model (0 for linear
        models) under ``"model"``, a (P,) tensor of the data's dtype (``spec.dtype``)."""
        spec = self._require_bound()
        model = problem.init_params(feature_dim=spec.dim, seed=seed, dtype=spec.dtype)
        return {"model": model.to(spec.device)}

    def init_clients(self, problem: Problem, clients: torch.Tensor, seed: int = 0
                     ) -> dict | None:
        """Initial state of the clients ``clients`` (S,): a dict of (S, ...) tensors, or None."""
        return None

    def broadcast(self, state: ServerState, clients: torch.Tensor) -> torch.Tensor:
        """What the sampled clients ``clients`` (S,) receive: one (P,) payload for all of
        them, or (S, P), one row per client, in the model's dtype (any other shape or
        dtype is refused)."""
        return state["model"]

    def client_config(self, state: ServerState) -> dict[str, Any]:
        """Scalars sent to the clients with the payload (e.g. a resolved step size)."""
        return {}

    def client_update(self, payload: torch.Tensor, ctx: ClientContext):
        """Run the local work of all sampled clients at once.

        Parameters
        ----------
        payload : (P,) shared or (S, P) per-client broadcast.
        ctx : the sampled clients' data, state and random streams.

        Returns
        -------
        A 3-tuple ``(uploads, client_state, info)``:

        uploads : (S, P) tensor of the payload's dtype.
        client_state : updated per-client state (dict of (S, ...) tensors) or None.
        info : dict of diagnostics for the round, ``{name: real number}`` (may be
            empty); a value is an int, a float, a NumPy number or a one-element tensor
            (anything else, a bool included, is refused). The round records their mean
            over the clients under the names :attr:`client_metrics` declares; another
            name, or a value that is not finite, is not recorded (with a warning).
        """
        raise NotImplementedError

    def aggregate(self, state: ServerState, uploads: torch.Tensor, cohort: Cohort
                  ) -> ServerState:
        """New server state from the uploads (S, P) of ``cohort``; rows that were not
        delivered are zero and carry no information. The state is a dict as :meth:`init`
        returns it: its (P,) model keeps the model's size and dtype."""
        raise NotImplementedError

    def model(self, state: ServerState) -> torch.Tensor:
        """The (P,) global model to evaluate."""
        return state["model"]

    def with_global_model(self, state: ServerState, model: torch.Tensor) -> ServerState:
        """``state`` with its global model set to ``model`` (P,); ``state`` is not modified.

        A Flower node receives only the global model; to ask :meth:`personalized` for its
        own model it stands in for the server's state with its initial state holding
        ``model``. A wrapper sets it in the state of the algorithm it wraps."""
        return {**state, "model": model}

    def round_metrics(self, state: ServerState) -> dict[str, float]:
        """Scalars the server records about the round it just aggregated (e.g. how many lost
        uploads a compensation replaced); empty by default."""
        return {}

    def personalized(self, state: ServerState, client_state: dict | None,
                     clients: torch.Tensor | None = None) -> torch.Tensor | None:
        """(N, P) personalised models of all clients, or None (no personalisation).

        ``client_state`` holds the rows of ``clients`` ((k,) ids; None: all N clients, in
        order); the result then has k rows, one per client of ``clients``."""
        return None

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{self.name}({args})"


for _name in ROUND_METHODS:  # the base class's own round methods refuse too
    setattr(Algorithm, _name, requires_bound(getattr(Algorithm, _name)))


def payload_rows(payload: torch.Tensor, size: int) -> torch.Tensor:
    """A broadcast as (S, P) local iterates: a shared (P,) payload is copied S times."""
    if payload.ndim == 1:
        return payload.expand(size, -1).clone()
    return payload.clone()


def payload_view(payload: torch.Tensor, size: int) -> torch.Tensor:
    """A broadcast as (S, P) rows to read, not to update: a shared (P,) payload is an
    expanded view, no copy (e.g. the start of :func:`~fedsparse.algorithms.local.local_train`,
    which copies what it trains)."""
    return payload.expand(size, -1) if payload.ndim == 1 else payload


def weighted_mean(uploads: torch.Tensor, cohort: Cohort) -> torch.Tensor:
    """``sum_i p_i x_i / sum_i p_i`` over the delivered uploads (weights renormalised).

    Rows that were not delivered are left out of the product, so nothing in them (not
    even a NaN) reaches the result.

    Parameters
    ----------
    uploads : (S, P); cohort : its weights (S,) and delivered mask (S,), at least one True.
    """
    rows = cohort.delivered
    w = cohort.weights[rows]
    w = (w / w.sum()).to(uploads.dtype).to(uploads.device)
    if bool(rows.all()):  # no (S, P) copy of the selected rows
        return w @ uploads
    return w @ uploads[rows.to(uploads.device)]


def check_step_size(name: str, value):
    """A step size argument: a positive number or "auto" (returned unchanged)."""
    if isinstance(value, str):
        if value != "auto":
            raise fail(name, value, 'must be a positive number or "auto"')
        return value
    check_float(name, value, positive=True)
    return value


def lipschitz_statistics(step_size, problem: Problem, split: ClientSplit
                         ) -> dict[str, torch.Tensor]:
    """``{"lipschitz": (S,) L_i}`` when ``step_size`` is "auto" (else nothing needed)."""
    if step_size != "auto":
        return {}
    if "lipschitz" not in problem.capabilities:
        raise fail("step_size", "auto", f"needs a Lipschitz estimate, which {problem.name} "
                   "does not provide; give a number")
    split = problem.prepare(split)  # pooled rows: padded, as linear models read them
    return {"lipschitz": problem.lipschitz(split.X, split.mean_weights())}


def resolve_step_size(step_size, stats: dict[str, torch.Tensor]) -> float:
    """A number, or "auto" = 1 / max_i L_i from the clients' ``stats["lipschitz"]``."""
    if step_size != "auto":
        return float(step_size)
    if "lipschitz" not in stats:
        raise ConfigError('step_size="auto" needs the clients\' Lipschitz statistics; bind '
                          "the algorithm with the stats of algorithm.statistics()")
    L = stats["lipschitz"]
    L = L[torch.isfinite(L)]  # clients that reported nothing (no node) carry NaN
    if L.numel() == 0 or float(L.max()) <= 0:
        raise fail("step_size", "auto", "needs a client loss with positive curvature, and "
                   f"every client's smoothness constant L_i is {L.tolist()[:5] or 'missing'} "
                   "(all-zero features?); give a number")
    return float(1.0 / L.max())
