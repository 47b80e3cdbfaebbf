"""The Problem protocol: what the round loop, the evaluation and the algorithms ask of a loss.

Every method is batched over a leading client axis S and over (padded) examples:
``X`` is (S, b, *feature_shape), ``y`` is (S, b) and ``w`` is (S, b) example weights
(1/n_i on a client's real or sampled examples, 0 on padding), so ``loss`` is each
client's weighted mean loss. ``params`` is (S, P), one model per client, or (P,), one
model shared by all.

:class:`Problem` holds only what every problem has: the model's size and layout, its
initial value, a data check, the loss, its gradient (and a gradient step in place,
:meth:`Problem.descend_`, which by default subtracts it), accuracy and per-example
metrics, and the choice of the data layout (:meth:`Problem.prepare`). What only some
problems have is named in ``capabilities`` and defined by those problems alone: the linear
models (:class:`~fedsparse.problems.linear.LinearProblem`) add a Lipschitz bound
(``"lipschitz"``) and FedGradMP's restricted solve (``"restricted_solve"``, Jeong et al.
2024); a network (:class:`~fedsparse.problems.neural.NeuralProblem`) adds its module
(``"neural"``). Asking a problem for a method it lacks raises a
:class:`~fedsparse.ConfigError` that says so.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._validation import ConfigError

#: What a local objective adds to the loss gradient, column block by column block:
#: ``term(block, at)`` returns the objective's gradient at ``params[at]`` given the loss
#: gradient's ``block`` there (it may build it in ``block``), ``at`` a (rows, columns)
#: pair of slices of the (S, P) parameters. It is called before ``params[at]`` changes,
#: and may read any other tensor at ``at`` (FedMac's w_i, FedProx's anchor).
GradientTerm = Callable[[torch.Tensor, tuple[slice, slice]], torch.Tensor]

#: Every row and column: the ``at`` of a term applied to the whole (S, P) gradient.
WHOLE = (slice(None), slice(None))

#: Methods only linear-score problems define, and what each is for (said when it is missing).
LINEAR_ONLY = {
    "lipschitz": "a Lipschitz bound (step_size='auto' needs one): give a numeric step_size",
    "curvature_scale": "a bound on the curvature of a per-example loss in a linear score",
    "l2": "a ridge coefficient",
    "link": "a per-example link of a linear score",
    "restricted_features": "the restricted_solve capability (FedGradMP's restricted "
                           "minimisation)",
    "restricted_metric": "the restricted_solve capability (FedGradMP's restricted "
                         "minimisation)",
    "restricted_solve": "the restricted_solve capability (FedGradMP's restricted "
                        "minimisation)",
}


class MissingMethod(ConfigError, AttributeError):
    """A problem was asked for a method only other problems define (an AttributeError
    too, so ``hasattr`` and ``getattr(problem, name, default)`` see it as absent)."""


class Problem:
    """Base class of every learning problem: the protocol the library calls.

    Subclasses define :meth:`loss` and :meth:`grad` and, where the defaults do not fit,
    the other methods. The defaults describe a flat model of ``feature_dim * blocks``
    entries that starts at 0 and reads every example as one vector of features.

    Attributes
    ----------
    name : the problem's name in configs and histories.
    task : "regression" or "classification": decides which metrics are recorded.
    blocks : rows the flat parameter vector is cut into for per-block sparsity (softmax:
        classes).
    capabilities : what an algorithm may ask beyond the protocol (checked when binding).
    pooled_ok : False if loss/grad read every client's rows as one flat (n_max, d) padded
        block (linear models); True if they are only called on small dense chunks gathered
        from any data layout, in the examples' own shape (networks). Read by :meth:`prepare`,
        :meth:`prepare_features` and :meth:`chunked_evaluation`, nowhere else.
    """

    name = "problem"
    task = "regression"
    blocks = 1
    capabilities: frozenset[str] = frozenset({"grad"})
    pooled_ok = False

    # ------------------------------------------------------------------ the model
    def param_dim(self, feature_dim: int) -> int:
        """Length P of the flat parameter vector for ``feature_dim`` features."""
        return feature_dim * self.blocks

    def layout(self, feature_dim: int):
        """The :class:`~fedsparse.models.ParamLayout` of the flat vector: one dense tensor."""
        from ..models.layout import ParamLayout

        return ParamLayout.dense(self.param_dim(feature_dim))

    def init_params(self, feature_dim: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
        """(P,) initial model of every algorithm: 0 (seed unused)."""
        return torch.zeros(self.param_dim(feature_dim), dtype=dtype)

    def check_data(self, data) -> None:
        """Raise a clear error if the data set does not fit this problem (e.g. label set)."""

    # ------------------------------------------------------------------ the loss
    def loss(self, params, X, y, w) -> torch.Tensor:  # pragma: no cover - interface
        """(S,) weighted mean loss per client."""
        raise NotImplementedError

    def grad(self, params, X, y, w) -> torch.Tensor:  # pragma: no cover - interface
        """(S, P) gradient of each client's loss."""
        raise NotImplementedError

    def descend_(self, params, X, y, w, step_size: float, *,
                 term: GradientTerm | None = None) -> torch.Tensor:
        """One gradient step in place on the (S, P) ``params`` (returned):
        ``params -= step_size * g``, g the loss gradient ``grad(params, X, y, w)`` or,
        with ``term``, the local objective's gradient that ``term`` makes of it
        (:data:`GradientTerm`: FedProx's proximal term, :func:`proximal_term`, or
        FedMac's and pFedMe's coupling to w_i). A problem may take the step block by
        block without forming the (S, P) gradient, with the same result."""
        g = self.grad(params, X, y, w)
        return params.sub_(g if term is None else term(g, WHOLE), alpha=step_size)

    def accuracy(self, params, X, y, w) -> torch.Tensor | None:
        """(S,) weighted accuracy per client, or None for regression."""
        return None

    def loss_and_accuracy(self, params, X, y, w) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`loss` and :meth:`accuracy` of the same clients, (S,) each (the accuracy
        None for regression), for evaluation. A problem may compute both from one
        forward pass, with the same numbers."""
        return self.loss(params, X, y, w), self.accuracy(params, X, y, w)

    def example_metrics(self, params, X, y) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-example loss and correctness of one shared model on a chunk of examples.

        Each example is evaluated as a one-example client of weight 1, so that
        ``sum_j w_j loss_j`` equals :meth:`loss` whenever the weights sum to 1.

        Parameters
        ----------
        params : (P,) shared model; X : (n, *feature_shape); y : (n,) targets.

        Returns
        -------
        loss : (n,) per-example loss; correct : (n,) bool, or None for regression.
        """
        ones = torch.ones(X.shape[0], 1, dtype=params.dtype, device=params.device)
        loss = self.loss(params, X.unsqueeze(1), y.unsqueeze(1), ones)
        acc = self.accuracy(params, X.unsqueeze(1), y.unsqueeze(1), ones)
        return loss, None if acc is None else acc > 0.5

    # ------------------------------------------------------------------ the data layout
    def prepare(self, data):
        """``data`` in the layout :meth:`loss` and :meth:`grad` read.

        Parameters
        ----------
        data : a :class:`~fedsparse.data.FederatedDataset` or one of its splits.

        Returns
        -------
        The same data for a ``pooled_ok`` problem; otherwise its padded layout with
        flattened features, (N, n_max, d) (an object without a padded form, such as a lazy
        data set, is returned as it is).
        """
        if self.pooled_ok or not hasattr(data, "padded"):
            return data
        return data.padded(flatten=True)

    def prepare_features(self, X, batch_dims: int = 1):
        """Features of examples, (*batch, *feature_shape), as this problem reads them.

        Parameters
        ----------
        X : dense features with ``batch_dims`` leading axes (1: a chunk of examples for
            :meth:`example_metrics`; 2: clients by rows for :meth:`loss`).
        batch_dims : the number of leading batch axes.

        Returns
        -------
        ``X`` flattened to (*batch, d) unless the problem is ``pooled_ok`` (it then reads
        the examples' own shape) or ``X`` is already flat or not a dense tensor.
        """
        if self.pooled_ok or not isinstance(X, torch.Tensor) or X.ndim <= batch_dims + 1:
            return X
        return X.reshape(*X.shape[:batch_dims], -1)

    def chunked_evaluation(self, data) -> bool:
        """True if ``data`` is evaluated example by example in chunks
        (:func:`fedsparse.metrics.client_means`): a ``pooled_ok`` problem, or pooled data.
        Otherwise every client is evaluated at once on the padded features."""
        from ..data.pooled import PooledRows

        return bool(self.pooled_ok) or any(
            isinstance(s.X, PooledRows) for s in (data.train, data.test) if s is not None)

    # ------------------------------------------------------------------ absent methods
    def __getattr__(self, name: str):
        # Reached only when normal lookup fails: a linear-only method asked of another
        # problem gets an error that names what it is for, not a bare AttributeError.
        if name in LINEAR_ONLY:
            raise MissingMethod(
                f"problem {self.name!r} has no {name}: {LINEAR_ONLY[name]}; it is defined "
                "by linear problems (least_squares, logistic, softmax)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def block_at(t: torch.Tensor, at: tuple[slice, slice]) -> torch.Tensor:
    """The block ``at`` of an (S, P) tensor, or of a (P,) one's columns (shared by every
    row); ``t`` itself for :data:`WHOLE`, without a dispatched call (a GPU's round of
    small steps is bound by such calls)."""
    if at is WHOLE:
        return t
    return t[..., at[1]] if t.ndim == 1 else t[at]


def proximal_term(params: torch.Tensor, mu: float, anchor: torch.Tensor | None
                  ) -> GradientTerm | None:
    """FedProx's proximal term (Li et al. 2020, eq. 2) as a :data:`GradientTerm`: the
    block of ``grad + mu (params - anchor)`` at ``params[at]``, ``params`` (S, P) and
    ``anchor`` (P,) or (S, P); None (the plain gradient) when ``mu`` is 0."""
    if not mu:
        return None

    def term(block: torch.Tensor, at: tuple[slice, slice]) -> torch.Tensor:
        return block.add_(block_at(params, at) - block_at(anchor, at), alpha=mu)

    return term


def proximal_grad(problem: Problem, params, X, y, w, mu: float = 0.0,
                  anchor: torch.Tensor | None = None) -> torch.Tensor:
    """A new (S, P) tensor: ``problem.grad(params, X, y, w) + mu (params - anchor)``, the
    gradient of FedProx's local objective (Li et al. 2020, eq. 2), ``anchor`` (P,) or
    (S, P); the plain gradient when ``mu`` is 0."""
    g = problem.grad(params, X, y, w)
    term = proximal_term(params, mu, anchor)
    return g if term is None else term(g, WHOLE)
