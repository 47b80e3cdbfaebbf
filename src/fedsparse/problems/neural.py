"""A neural network as a Problem: the flat vector of a torch module's parameters.

``fs.problems.neural(module)`` turns any :class:`torch.nn.Module` that maps ``(b,
*feature_shape)`` to logits ``(b, C)`` into a classification problem whose model is the flat
(P,) vector of the module's trainable parameters (``parameters()`` order; see
:class:`fedsparse.models.ParamLayout`). ``loss``, ``grad`` and ``accuracy`` keep the contract of
every Problem: ``params`` (S, P) or (P,), ``X`` (S, b, *feature_shape), ``y`` (S, b) float labels
holding class indices, ``w`` (S, b) example weights, and each client's loss is
``sum_j w_j CE_j`` (the weighted mean cross-entropy).

Evaluation is functional: :func:`torch.func.functional_call` runs the module on each client's
parameters, either vectorised over the client axis (:func:`torch.func.vmap` of
:func:`torch.func.grad`) or one client after another (autograd per client). Which one is
faster depends on the shape and is chosen automatically (see
:func:`fedsparse.problems._neural_paths.auto_path`); the two give
the same numbers up to rounding, and so does any grouping of clients into chunks.

Normalisation with batch statistics (a decision, documented here)
-----------------------------------------------------------------
BatchNorm's running statistics are buffers updated in place by the forward pass; they
cannot go through ``grad``/``vmap`` transforms and are not gradients to be averaged.
fedsparse therefore runs every BatchNorm layer on the statistics of the current batch only
(no running statistics), as HeteroFL's "static batch normalisation" does (Diao et al.
2021): :func:`fedsparse.models.resnet20` and :func:`fedsparse.models.vgg_small` build their
norms with ``track_running_stats=False``, and a user module's BatchNorm layers are switched
to the same behaviour on the problem's private copy (the caller's module is untouched).
Consequences:

- a client's statistics come from its own rows with positive weight only: padded rows
  (weight 0) never enter them. Clients whose batch has zero-weight rows are computed one at
  a time on their real rows (slower, exact); other clients are vectorised;
- statistics are plain (unweighted) means over those rows;
- evaluation (``accuracy``, ``example_metrics``) also normalises with the statistics of the
  evaluated batch or chunk, so predictions depend a little on the chunk; keep evaluation
  chunks large (hundreds of examples). GroupNorm (``resnet20(norm="group")``) and LayerNorm
  compute per-example statistics and need none of this.

The module runs in eval mode (dropout off), so every call is deterministic.
"""

from __future__ import annotations

import copy
import math
from contextlib import nullcontext

import torch
from torch import nn
from torch.func import functional_call, replace_all_batch_norm_modules_

from .._memory import client_chunk, eval_chunk
from .._validation import ConfigError, check_choice, check_dtype, check_int, fail
from ..models.layout import ParamLayout
from ._mlp import mlp_descend_, mlp_grad, mlp_layers
from ._module_checks import check_module_tensors, vmap_refusal, vmap_refused
from ._neural_paths import (
    EVERY,
    PATHS,
    auto_path,
    autocast_dtype,
    check_autocast,
    chunks,
    cross_entropy,
    placed,
    reduction,
    single_client,
)
from ._stacked import sequential_stack
from ._stacked_resnet import resnet_stack
from .base import Problem, check_dense_features, check_labels

# Saved activations plus their gradients plus the forward's temporaries, per activation.
_GRAD_MEMORY_FACTOR = 3
# Per client of a vectorised gradient: its weights (a copy when sliced from the stack),
# their gradient, and its row of the (s, P) result.
_PARAM_COPIES = 3


def _short(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


class NeuralProblem(Problem):
    """Cross-entropy classification with a torch module (see the module docstring).

    Parameters
    ----------
    module : ``nn.Module`` mapping ``(b, *feature_shape)`` to logits ``(b, C)``; copied, so
        later changes to it do not affect the problem.
    dtype : default dtype of :meth:`init_params` when its ``dtype`` is None (None: the
        module's own parameter dtype). ``loss``/``grad`` always compute in the dtype of
        ``params``.
    path : how clients are evaluated; results do not depend on it beyond rounding.
        ``"auto"``: a plain ReLU MLP takes the closed-form batched backward ``"mlp"``; a
        sequential convolutional network runs ``"stacked"`` (the clients as one network
        with grouped layers, :mod:`fedsparse.problems._stacked`), and so does ResNet-20
        on a GPU, and on the CPU on images of 32 x 32 or more; other networks follow
        the measured rule of ``_neural_paths.auto_path``; a network with a frozen
        parameter (``requires_grad=False``, kept as the module holds it) takes neither
        of the first two. Or one of ``"mlp"``, ``"stacked"``, ``"vmap"``
        (:func:`torch.func.vmap`) and ``"loop"`` (one client at a time).
    chunk_clients : clients per vectorised call; None sizes chunks from the memory of the
        device (:func:`fedsparse._memory.memory_budget`) and each client's estimated need
        (:meth:`client_bytes`), once per device, dtype and batch shape.
    autocast : None (the default: every computation in the parameters' dtype) or
        ``"bf16"``, an opt-in lower precision for training on a GPU: each gradient's
        forward pass runs under :func:`torch.autocast` to bfloat16 (convolutions and
        matrix products in bfloat16, the rest as autocast chooses), its logits return to
        float32 for the loss, and the backward pass, the gradient, the models and the
        aggregation stay float32. Losses and accuracies (evaluation) are computed in
        float32. Results change (bfloat16 keeps 8 bits of mantissa): a run with it is not
        the float32 run and does not reproduce pinned float32 numbers. Needs float32
        parameters, and an autograd path (a plain MLP then runs ``"vmap"``, not its
        float32 closed form).

    Attributes
    ----------
    num_classes : outputs of the last ``nn.Linear`` at build time, then the logit width
        found by :meth:`check_data`'s forward pass (None before if the module has no
        ``nn.Linear``).
    feature_shape : the input shape accepted by :meth:`check_data` (None before).
    """

    name = "neural"
    task = "classification"
    capabilities = frozenset({"grad", "neural"})
    pooled_ok = True
    blocks = 1

    def __init__(self, module: nn.Module, *, dtype: torch.dtype | None = None,
                 path: str = "auto", chunk_clients: int | None = None,
                 autocast: str | None = None):
        if not isinstance(module, nn.Module):
            raise fail("module", type(module).__name__, "must be a torch.nn.Module")
        check_dtype("dtype", dtype, allow_none=True)
        self.path = check_choice("path", path, ("auto", "vmap", "loop", "mlp", "stacked"))
        self.chunk_clients = check_int("chunk_clients", chunk_clients, minimum=1,
                                       allow_none=True)
        check_module_tensors(module)
        template = copy.deepcopy(module)
        self._layout = ParamLayout.from_module(template)
        if len(self._layout) == 0:
            raise fail("module", type(module).__name__,
                       "has no trainable parameters; a neural problem trains its parameters")
        # Running statistics cannot go through grad transforms: batch statistics only.
        replace_all_batch_norm_modules_(template)
        template.eval()
        self._template = template
        self._names = self._layout.names
        self._dtype = dtype
        self.module_name = type(module).__name__
        self._batch_stats = any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                                for m in template.modules())
        self.autocast = check_autocast(autocast, path, self._batch_stats, self.module_name)
        self._has_conv = any(isinstance(m, nn.modules.conv._ConvNd) for m in template.modules())
        # The closed-form and stacked paths read every layer's weights from the flat
        # vector; a frozen parameter (requires_grad=False) is not in it, so a network
        # with one runs through functional_call ("vmap" or "loop"), which reads it from
        # the module.
        frozen = next((n for n, p in template.named_parameters() if not p.requires_grad),
                      None)
        if frozen is not None and path in ("mlp", "stacked"):
            raise fail("path", path, f"cannot run {self.module_name}, whose parameter "
                       f"{frozen!r} is frozen (requires_grad=False): the {path!r} path "
                       "trains every parameter; give path=\"auto\", \"vmap\" or \"loop\"")
        self._mlp = mlp_layers(template, self._layout) \
            if path in ("auto", "mlp") and autocast is None and frozen is None else None
        self._stacked = None
        if path in ("auto", "stacked") and frozen is None:
            self._stacked = sequential_stack(template) or resnet_stack(template)
        if path == "stacked" and self._stacked is None:
            raise fail("path", path, "needs an nn.Sequential convolutional network of Conv2d, "
                       "norm, pooling, activation, Flatten and Linear layers (as fs.models.cnn "
                       "and fs.models.vgg_small build), or fs.models.resnet20's network")
        self._stack = None if self._stacked is None else \
            "sequential" if type(template) is nn.Sequential else "residual"
        if path == "mlp" and self._mlp is None:
            raise fail("path", path, "needs a plain ReLU MLP (nn.Sequential of Linear layers "
                       "with ReLU between them, as fs.models.mlp builds)")
        linears = [m for m in template.modules() if isinstance(m, nn.Linear)]
        self.num_classes: int | None = linears[-1].out_features if linears else None
        self.feature_shape: tuple[int, ...] | None = None
        self._copies: dict[tuple, nn.Module] = {}
        self._activation: dict[tuple, int] = {}
        self._chunks: dict[tuple, int] = {}

    @property
    def module(self) -> nn.Module:
        """The template network (a private copy of the module given; its batch norms use
        batch statistics only). Read it, do not train it: the flat vectors are the models."""
        return self._template

    def __repr__(self) -> str:
        low = "" if self.autocast is None else f", autocast={self.autocast!r}"
        return f"NeuralProblem({self.module_name}, P={self._layout.size}{low})"

    # ------------------------------------------------------------------ the Problem contract
    def param_dim(self, feature_dim: int | None = None) -> int:
        """P, the number of trainable parameters (independent of ``feature_dim``)."""
        return self._layout.size

    def layout(self, feature_dim: int | None = None) -> ParamLayout:
        """The :class:`~fedsparse.models.ParamLayout` of the flat vector."""
        return self._layout

    def init_params(self, seed: int = 0, dtype: torch.dtype | None = None, *,
                    feature_dim: int | None = None) -> torch.Tensor:
        """The module's own initialisation, seeded: (P,) flat vector.

        Every submodule's ``reset_parameters`` runs (children before parents, so a model's
        own scheme such as ResNet-20's Kaiming-normal has the last word) on a fresh copy,
        with torch's CPU generator seeded by ``seed`` inside :func:`torch.random.fork_rng`
        (the global random state is left as it was). The same seed gives bitwise the same
        vector in any process on one kind of CPU (torch's initialisers round differently,
        in the last bits, under its AVX-512 and its default kernels); the values are drawn
        in the module's dtype and then cast to ``dtype``, so float32 and float64 runs start
        from the same model. Parameters owned by no module with ``reset_parameters`` keep
        the values of the module passed in.

        Parameters
        ----------
        seed : the seed, first so that ``init_params(1)`` is the seed-1 model.
        dtype : the vector's dtype (None: the problem's ``dtype``, else the module's).
        feature_dim : keyword only, and not needed: a network's size does not depend on
            it. Given (as the generic ``Problem`` interface does), it must be the number of
            features the network reads (the product of its input shape); any other value
            is refused, since it is most likely a misplaced argument.
        """
        seed = check_int("seed", seed, minimum=0)
        check_dtype("dtype", dtype, allow_none=True)
        if feature_dim is not None:
            self._check_feature_dim(check_int("feature_dim", feature_dim, minimum=1))
        dtype = dtype or self._dtype or next(self._template.parameters()).dtype
        fresh = copy.deepcopy(self._template)
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            for m in reversed(list(fresh.modules())):
                reset = getattr(m, "reset_parameters", None)
                if callable(reset):
                    reset()
        trained = dict(fresh.named_parameters())
        with torch.no_grad():
            return torch.cat([trained[n].reshape(-1) for n in self._names]).to(dtype)

    def _check_feature_dim(self, feature_dim: int) -> None:
        """Refuse a ``feature_dim`` the network cannot read: the product of the feature
        shape once :meth:`check_data` has seen the data, else a flat (feature_dim,) input
        or square images with the first convolution's channels that the module accepts."""
        if self.feature_shape is not None:
            ok = math.prod(self.feature_shape) == feature_dim
        else:
            shapes = [(feature_dim,)]
            convs = [m for m in self._template.modules()
                     if isinstance(m, nn.modules.conv._ConvNd)]
            if convs and feature_dim % convs[0].in_channels == 0:
                c = convs[0].in_channels
                side = math.isqrt(feature_dim // c)
                if side * side * c == feature_dim:
                    shapes.append((c, side, side))
            ok = False
            for shape in shapes:
                try:
                    self._probe(shape)
                    ok = True
                    break
                except ConfigError:
                    continue
        if not ok:
            known = "" if self.feature_shape is None else \
                f" (its feature shape is {self.feature_shape})"
            raise fail("feature_dim", feature_dim,
                       f"is not the number of features {self.module_name} reads{known}; a "
                       "neural problem does not need it: call init_params(seed) or "
                       "init_params(seed=..., dtype=...)")

    def check_data(self, data) -> None:
        """Check the feature shape (one forward pass) and the labels of ``data``.

        Raises
        ------
        ConfigError
            naming the feature shape and the model if the model rejects inputs of that
            shape or does not return ``(batch, C)`` logits with C >= 2, naming the labels
            if any is not an integer in [0, C), and naming ``autocast`` if the data (and
            so the run's models) are not float32.
        """
        check_dense_features(data, repr(self))
        # a run's models take its data's dtype: refused now, not at the first gradient
        self.check_model_dtype(data.dtype)
        shape = getattr(data, "feature_shape", None)
        if shape is None:
            shape = tuple(data.train.X.shape[2:])
        shape = tuple(int(s) for s in shape)
        logits = self._probe(shape)
        if logits.ndim != 2 or logits.shape[0] != 2 or logits.shape[1] < 2:
            raise fail("feature_shape", shape,
                       f"the model {self.module_name} returns outputs of shape "
                       f"{tuple(logits.shape)} for a batch of 2; it must return logits "
                       "(batch, num_classes) with num_classes >= 2")
        if not logits.is_floating_point():  # no gradient flows through an integer
            raise fail("module", self.module_name, f"returns logits of dtype "
                       f"{str(logits.dtype).removeprefix('torch.')}; they must be floating "
                       "point (a .long() or .round() in the forward stops the gradient)")
        self.num_classes = int(logits.shape[1])
        self.feature_shape = shape
        check_labels(data, {float(c) for c in range(self.num_classes)}, repr(self),
                     f"integers in [0, {self.num_classes})")

    def check_model_dtype(self, dtype: torch.dtype) -> None:
        """Refuse models of ``dtype`` that the problem cannot train: with ``autocast`` a
        ConfigError naming it unless ``dtype`` is float32."""
        autocast_dtype(self.autocast, dtype)

    def loss(self, params, X, y, w) -> torch.Tensor:
        """(S,) ``sum_j w_j CE_j`` per client (differentiable if ``params`` requires grad)."""
        return self._run("loss", params, X, y, w)

    def grad(self, params, X, y, w) -> torch.Tensor:
        """(S, P) gradient of each client's loss with respect to its parameters."""
        return self._run("grad", params, X, y, w)

    def descend_(self, params, X, y, w, step_size: float, *, term=None) -> torch.Tensor:
        """One local step in place on the (S, P) ``params`` (returned), as
        :meth:`Problem.descend_`. On the CPU a plain ReLU MLP's closed form subtracts each
        layer's gradient block (with ``term``'s part) from its slice of ``params``
        (:func:`mlp_descend_`): the same bits, with no (S, P) gradient written and read
        again. A GPU keeps the one subtraction: its round of small steps is bound by
        dispatched calls, not memory, and the blocks' slices and subtractions are six
        calls more a step."""
        S = X.shape[0]
        if self._mlp is None or type(self).grad is not NeuralProblem.grad \
                or not isinstance(params, torch.Tensor) or params.ndim != 2 \
                or params.device.type != "cpu" \
                or params.shape != (S, self._layout.size) \
                or y.shape != X.shape[:2] or w.shape != X.shape[:2]:
            return super().descend_(params, X, y, w, step_size, term=term)  # (grad checks)
        device, dtype = params.device, params.dtype
        X, w, y = placed(X, device, dtype), placed(w, device, dtype), \
            placed(y, device, torch.long)
        for rows in chunks(S, None, self._chunk(X)) if S else []:
            # params[rows] is a view: the step lands in params
            mlp_descend_(self._mlp, params[rows], X[rows], y[rows], w[rows], step_size,
                         term, rows)
        return params

    def accuracy(self, params, X, y, w) -> torch.Tensor:
        """(S,) ``sum_j w_j [argmax logits_j == y_j]`` per client."""
        with torch.no_grad():
            return self._run("correct", params, X, y, w)

    def loss_and_accuracy(self, params, X, y, w) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`loss` and :meth:`accuracy` (S,) each, not differentiable, from one
        forward pass: the same numbers for half the work."""
        with torch.no_grad():
            both = self._run("metrics", params, X, y, w)
        return both[:, 0], both[:, 1]

    def example_metrics(self, params, X, y) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-example cross-entropy and correctness of one shared model on a chunk.

        Parameters
        ----------
        params : (P,) shared model; X : (n, *feature_shape); y : (n,) labels.

        Returns
        -------
        loss : (n,) cross-entropy per example; correct : (n,) bool.
        Batch-statistics norms use the statistics of the whole chunk.
        """
        params = self._check_params(params)
        if params.ndim != 1:
            raise fail("params", tuple(params.shape), "must be one shared (P,) model")
        X = X.to(device=params.device, dtype=params.dtype)
        y = y.to(params.device).long()
        module = self._module(params.device, params.dtype)
        tensors = self._layout.unflatten(params)
        n = X.shape[0]
        # Per-example layers: a chunk larger than the device's budget is evaluated in
        # parts (same numbers). Batch statistics depend on the chunk, so it stays whole.
        step = max(n, 1) if self._batch_stats or n == 0 else eval_chunk(
            X.element_size() * self._example_elements(tuple(X.shape[1:])), X.device,
            examples=n)
        losses, hits = [], []
        with torch.no_grad():
            for a in range(0, max(n, 1), step):
                logits = functional_call(module, tensors, (X[a:a + step],))
                losses.append(cross_entropy(logits, y[a:a + step]))
                hits.append(logits.argmax(-1) == y[a:a + step])
        if len(losses) == 1:
            return losses[0], hits[0]
        return torch.cat(losses), torch.cat(hits)

    # ------------------------------------------------------------------ internals
    def _check_params(self, params) -> torch.Tensor:
        if not isinstance(params, torch.Tensor) or params.ndim not in (1, 2) \
                or params.shape[-1] != self._layout.size:
            shape = tuple(params.shape) if isinstance(params, torch.Tensor) else params
            raise fail("params", shape, f"must be (P,) or (S, P) with P={self._layout.size}")
        return params

    def _module(self, device: torch.device, dtype: torch.dtype) -> nn.Module:
        """The private copy of the module on ``device`` in ``dtype`` (made once, cached)."""
        key = (torch.device(device), dtype)
        if key not in self._copies:
            self._copies[key] = copy.deepcopy(self._template).to(device=device, dtype=dtype)
        return self._copies[key]

    def _probe(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Logits of two zero examples of ``shape`` (two: batch norms need more than one)."""
        module = self._module(torch.device("cpu"), next(self._template.parameters()).dtype)
        x = torch.zeros((2, *shape), dtype=next(self._template.parameters()).dtype)
        try:
            with torch.no_grad():
                out = module(x)
        except (RuntimeError, ValueError, IndexError, TypeError) as e:
            raise fail("feature_shape", shape,
                       f"the model {self.module_name} rejects inputs of this shape "
                       f"({_short(e)})") from None
        if not isinstance(out, torch.Tensor):
            raise fail("module", self.module_name, "must return a tensor of logits")
        return out

    def _activation_elements(self, shape: tuple[int, ...]) -> int:
        """Elements of every submodule's output for one example (measured once per shape)."""
        if shape not in self._activation:
            total = [0]

            def count(_m, _inputs, out):
                if isinstance(out, torch.Tensor):
                    total[0] += out.numel()

            module = self._module(torch.device("cpu"), next(self._template.parameters()).dtype)
            hooks = [m.register_forward_hook(count) for m in module.modules()]
            try:
                self._probe(shape)
            finally:
                for h in hooks:
                    h.remove()
            self._activation[shape] = max(1, total[0] // 2)
        return self._activation[shape]

    def client_bytes(self, batch: int, feature_shape: tuple[int, ...],
                     itemsize: int = 4, *, grad: bool = True) -> int:
        """Estimated peak bytes of one client in a vectorised call.

        Parameters
        ----------
        batch : the client's examples in the call.
        feature_shape : the shape of one example.
        itemsize : bytes per element (4 for float32, 8 for float64).
        grad : a gradient call (saved activations, their gradients and the parameter
            copies), or a forward-only one.

        Returns
        -------
        ``P x itemsize x 3`` (weights, gradient, result row) plus ``batch x`` (input plus
        activation elements of one example) ``x itemsize x 3`` (saved activations, their
        gradients, temporaries); a forward pass counts the activations once and one copy
        of the parameters.
        """
        activations = self._example_elements(tuple(int(s) for s in feature_shape))
        factor = _GRAD_MEMORY_FACTOR if grad else 1
        copies = _PARAM_COPIES if grad else 1
        return itemsize * (copies * self._layout.size + factor * int(batch) * activations)

    def _example_elements(self, shape: tuple[int, ...]) -> int:
        """Elements one example of feature shape ``shape`` holds in a forward pass: its
        input and its activations."""
        return self._activation_elements(shape) + math.prod(shape)

    def _chunk(self, X: torch.Tensor) -> int:
        """Clients per vectorised call for client data ``X`` (S, b, ...): the fixed
        ``chunk_clients``, else as many as the device's budget holds (computed once per
        device, dtype and shape: no device query on later calls)."""
        if self.chunk_clients is not None:
            return self.chunk_clients
        key = (X.device, X.dtype, tuple(X.shape[1:]))
        if key not in self._chunks:
            need = self.client_bytes(X.shape[1], tuple(X.shape[2:]), X.element_size())
            self._chunks[key] = client_chunk(need, X.device)
        return self._chunks[key]

    def _method(self, X: torch.Tensor) -> str:
        """``"stacked"``, ``"vmap"`` or ``"loop"`` for client data ``X`` (S, b, ...)."""
        if self.path == "mlp":
            return "loop"  # the closed form covers gradients only
        if self.path != "auto":
            return self.path
        method = auto_path(X, self._has_conv, self._stack)
        if method == "vmap" and self.autocast is not None and self._batch_stats:
            return "loop" if self._stack is None else "stacked"  # (see __init__)
        return method

    def _run(self, kind: str, params, X, y, w) -> torch.Tensor:
        params = self._check_params(params)
        S = X.shape[0]
        if y.shape != X.shape[:2] or w.shape != X.shape[:2] or (
                params.ndim == 2 and params.shape[0] != S):
            raise ConfigError(f"shapes do not match: params {tuple(params.shape)}, X "
                              f"{tuple(X.shape)}, y {tuple(y.shape)}, w {tuple(w.shape)}; "
                              "expected (S, P) or (P,), (S, b, ...), (S, b), (S, b)")
        device, dtype = params.device, params.dtype
        low = autocast_dtype(self.autocast, dtype) if kind == "grad" else None
        X, w = placed(X, device, dtype), placed(w, device, dtype)
        y = placed(y, device, torch.long)
        module = self._module(device, dtype)
        shape = {"grad": (S, self._layout.size), "metrics": (S, 2)}.get(kind, (S,))
        differentiable = kind == "loss" and params.requires_grad
        if S == 0:
            return torch.zeros(shape, device=device, dtype=dtype)
        if kind != "grad" and params.ndim == 1 and not self._batch_stats:
            # One shared model and per-example layers: one forward on the merged batch.
            logits = functional_call(module, self._layout.unflatten(params),
                                     (X.reshape(-1, *X.shape[2:]),))
            logits = logits.reshape(S, X.shape[1], -1)
            return reduction(kind)(logits, y, w)
        # Batch statistics must not see zero-weight rows: such clients run alone on their
        # real rows; every other client is vectorised.
        # Without batch statistics every client is regular: no data-dependent index (whose
        # size would need a device-to-host synchronisation on a GPU).
        solo = (w <= 0).any(-1) if self._batch_stats else None
        parts = chunks(S, solo, self._chunk(X))
        whole = len(parts) == 1 and parts[0] is EVERY  # the result is the one call's
        pieces = [] if differentiable else None
        out = None if differentiable or whole else \
            torch.empty(shape, device=device, dtype=dtype)
        method = self._method(X)
        run = PATHS[method]
        net = self._stacked if method == "stacked" else module
        order = []
        ctx = nullcontext() if differentiable else torch.no_grad()
        with ctx:
            for rows in parts:
                # a round of small steps is bound by the host on a GPU: every client at
                # once takes no slice of the arguments at all
                p = params if params.ndim == 1 or rows is EVERY else params[rows]
                Xr, yr, wr = (X, y, w) if rows is EVERY else (X[rows], y[rows], w[rows])
                if kind == "grad" and self._mlp is not None:
                    res = mlp_grad(self._mlp, p, Xr, yr, wr)
                else:
                    try:
                        res = run(net, self._layout, kind, p, Xr, yr, wr, low)
                    except RuntimeError as exc:
                        what = vmap_refusal(exc) if method == "vmap" else None
                        if what is not None:
                            raise vmap_refused(what, exc, self._template) from None
                        raise
                if differentiable:
                    pieces.append(res)
                    order.append(torch.arange(S, device=device)[rows])
                elif rows is EVERY:  # one chunk of every client: no (S, P) copy
                    out = res
                else:
                    out[rows] = res
            for i in ([] if solo is None else torch.nonzero(solo).reshape(-1).tolist()):
                real = w[i] > 0
                p = params if params.ndim == 1 else params[i]
                res = single_client(module, self._layout, kind, p, X[i][real], y[i][real],
                                    w[i][real], low)
                if differentiable:
                    pieces.append(res.reshape(1))
                    order.append(torch.tensor([i], device=device))
                else:
                    out[i] = res
        if differentiable:
            perm = torch.cat(order)
            return torch.cat(pieces)[torch.argsort(perm)]
        return out


def neural(module: nn.Module, *, dtype: torch.dtype | None = None, path: str = "auto",
           chunk_clients: int | None = None, autocast: str | None = None) -> NeuralProblem:
    """Cross-entropy classification with the torch ``module`` (see :class:`NeuralProblem`).

    >>> import fedsparse as fs
    >>> problem = fs.problems.neural(fs.models.mlp(784, (100,), 10))
    >>> problem.param_dim()
    79510
    """
    return NeuralProblem(module, dtype=dtype, path=path, chunk_clients=chunk_clients,
                         autocast=autocast)
