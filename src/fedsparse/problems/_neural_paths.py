"""How a neural problem evaluates many clients: the weighted cross-entropy and its paths.

Every function takes one chunk of clients, ``p`` (P,) shared or (s, P) per client, ``X``
(s, b, *feature_shape), ``y`` (s, b) long labels and ``w`` (s, b) weights, and returns (s,)
for ``kind`` ``"loss"`` / ``"correct"`` or (s, P) for ``"grad"``. The paths give the same
numbers up to rounding; :func:`auto_path` picks between the two general ones. ``low``, a
gradient's opt-in lower precision, runs each forward pass under :func:`torch.autocast` to
that dtype and takes the logits back to float32 before the loss; the backward pass runs
outside autocast, as PyTorch advises (:func:`forward`).
:class:`fedsparse.problems.neural.NeuralProblem` owns the choice, the chunking and the clients
that must run alone (batch statistics with padded rows).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from .._validation import check_choice, fail
from ..models.layout import ParamLayout
from ._stacked import stacked_grad


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy, classes on the last axis: (..., C), (...) -> (...)."""
    return torch.logsumexp(logits, -1) - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)


def weighted_ce(logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``sum_j w_j CE_j`` over the last example axis; zero-weight rows contribute exactly 0
    (even if their logits overflow)."""
    ce = cross_entropy(logits, y)
    return torch.where(w > 0, w * ce, torch.zeros_like(ce)).sum(-1)


def weighted_correct(logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``sum_j w_j [argmax logits_j == y_j]`` over the last example axis."""
    hit = logits.argmax(-1) == y
    return torch.where(hit & (w > 0), w, torch.zeros_like(w)).sum(-1)


def forward(call, X: torch.Tensor, low: torch.dtype | None) -> torch.Tensor:
    """``call(X)``, the logits; with ``low`` (``torch.bfloat16``) the forward runs under
    autocast to it and its float32 logits are returned, so that the loss and the backward
    pass run in float32 (a backward under autocast would accumulate in the low dtype)."""
    if low is None:
        return call(X)
    with torch.autocast(X.device.type, dtype=low):
        logits = call(X)
    return logits.float()


def check_autocast(autocast, path: str, batch_stats: bool, name: str) -> str | None:
    """A neural problem's ``autocast`` (None or ``"bf16"``), refused with the paths that
    cannot take it: the MLP's closed form (float32 arithmetic written out) and, for
    networks with batch norms, vmap (torch's batch-norm backward under vmap refuses
    bfloat16 inputs with float32 weights, torch 2.13; the stacked and loop paths take
    them, and ``"auto"`` picks one of those)."""
    check_choice("autocast", autocast, (None, "bf16"))
    if autocast is not None and path == "mlp":
        raise fail("path", path, "computes the MLP's gradient in closed form in the "
                   "parameters' dtype, without autocast; with autocast=\"bf16\" leave "
                   "path \"auto\" (or give \"vmap\")")
    if autocast is not None and path == "vmap" and batch_stats:
        raise fail("autocast", autocast, f"cannot run {name}'s batch norms on the vmap "
                   "path; give path=\"loop\" (or \"stacked\" for networks that stack), or "
                   "leave autocast out")
    return autocast


def autocast_dtype(autocast: str | None, dtype: torch.dtype) -> torch.dtype | None:
    """The dtype a gradient's forward pass runs in for models of ``dtype`` (None: no
    autocast); ConfigError naming ``autocast`` unless the models are float32."""
    if autocast is None:
        return None
    if dtype != torch.float32:
        raise fail("autocast", autocast, f"runs float32 models' forward passes in "
                   f"bfloat16; this model is {dtype}: give dtype float32, or leave "
                   "autocast out")
    return torch.bfloat16


def weighted_metrics(logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """:func:`weighted_ce` and :func:`weighted_correct` of the same logits, stacked on a
    last axis of 2."""
    return torch.stack([weighted_ce(logits, y, w), weighted_correct(logits, y, w)], dim=-1)


def reduction(kind: str):
    """The per-client reduction of logits for a forward-only ``kind``: ``"loss"``,
    ``"correct"`` or ``"metrics"`` (both)."""
    return {"loss": weighted_ce, "correct": weighted_correct, "metrics": weighted_metrics}[kind]


def single_client(module: nn.Module, layout: ParamLayout, kind: str, p, X, y, w,
                  low: torch.dtype | None = None) -> torch.Tensor:
    """One client, ``X`` (b, ...): a scalar (loss, correct) or its (P,) gradient, by autograd
    (``low``: the gradient's forward precision, see :func:`forward`)."""
    if X.shape[0] == 0:  # a client with no real rows: nothing to fit
        n = layout.size if kind == "grad" else None
        return torch.zeros(() if n is None else (n,), device=p.device, dtype=p.dtype)
    if kind != "grad":
        logits = functional_call(module, layout.unflatten(p), (X,))
        return reduction(kind)(logits, y, w)
    leaves = [t.detach().requires_grad_(True) for t in layout.unflatten(p).values()]
    tensors = dict(zip(layout.names, leaves, strict=True))
    with torch.enable_grad():
        logits = forward(lambda x: functional_call(module, tensors, (x,)), X, low)
        value = weighted_ce(logits, y, w)
    grads = torch.autograd.grad(value, leaves, allow_unused=True)
    return torch.cat([(torch.zeros_like(t) if g is None else g).reshape(-1)
                      for g, t in zip(grads, leaves, strict=True)])


def looped(module: nn.Module, layout: ParamLayout, kind: str, p, X, y, w,
           low: torch.dtype | None = None) -> torch.Tensor:
    """Clients one after another: (s,) or (s, P)."""
    res = [single_client(module, layout, kind, p if p.ndim == 1 else p[i], X[i], y[i], w[i],
                         low) for i in range(X.shape[0])]
    return torch.stack(res)


def stacked(net, layout: ParamLayout, kind: str, p, X, y, w,
            low: torch.dtype | None = None) -> torch.Tensor:
    """Clients as one network with grouped layers (:mod:`._stacked`; ``net`` the stacked
    network, a :data:`._stacked.StackedNet`): (s,) or (s, P)."""
    if kind == "grad":
        run = net if low is None else \
            (lambda tensors, x: forward(lambda xs: net(tensors, xs), x, low))
        return stacked_grad(run, layout, weighted_ce, p, X, y, w)
    if p.ndim == 1:
        p = p.expand(X.shape[0], -1)
    return reduction(kind)(net(layout.unflatten(p), X), y, w)


def vmapped(module: nn.Module, layout: ParamLayout, kind: str, p, X, y, w,
            low: torch.dtype | None = None) -> torch.Tensor:
    """Clients vectorised with :func:`torch.func.vmap`: (s,) or (s, P)."""
    pdim = None if p.ndim == 1 else 0
    pieces = layout.unflatten(p)
    if kind == "grad":
        def client_loss(tensors, Xi, yi, wi):
            logits = forward(lambda x: functional_call(module, tensors, (x,)), Xi, low)
            return weighted_ce(logits, yi, wi)

        g = vmap(grad(client_loss), in_dims=(pdim, 0, 0, 0))(pieces, X, y, w)
        return torch.cat([g[n].reshape(X.shape[0], -1) for n in layout.names], dim=-1)
    reduce = reduction(kind)

    def client_value(tensors, Xi, yi, wi):
        return reduce(functional_call(module, tensors, (Xi,)), yi, wi)

    return vmap(client_value, in_dims=(pdim, 0, 0, 0))(pieces, X, y, w)


PATHS = {"stacked": stacked, "vmap": vmapped, "loop": looped}


# How clients are evaluated on CPU, measured with benchmarks/bench_models_grad.py on this
# project's 2-core machine (torch 2.13, float32, one grad call, best of several runs with
# the two paths alternated; ranges over repeated runs). Entries are loop time / vmap
# time (> 1: vmap is faster):
#
#   model                          S x b      1 thread   2 threads
#   MLP 784-100-10                 100 x 20   1.30-2.65     8.6   (vmap 24 ms, loop 210 ms)
#   MLP 784-100-10                  10 x 20     1.81
#   MLP 784-100-10                1000 x 20     1.57
#   MLP 784-100-10                  20 x 200    1.31
#   MLP 60-20-10                   100 x 20    17.0
#   small CNN (fs.models.cnn())     20 x 20   0.73-0.85     0.99  (vmap 271 ms, loop 269 ms)
#   small CNN                        5 x 20     0.92        0.94
#   small CNN                       50 x 20     0.75        1.12
#   small CNN                       20 x 2      1.52
#   small CNN                       20 x 5      1.23
#   small CNN                       20 x 8      1.04
#   small CNN                       20 x 12   0.87-1.05
#   small CNN                       20 x 64     0.69        0.66
#   McMahan et al.'s CNN            20 x 20     0.92
#   ResNet-20 (BN / GN), 28 x 28     4 x 16     0.80 / 0.73
#   ResNet-20 BN                     8 x 4      1.26
#   VGG small, 32 x 32              10 x 20     1.12
#
# vmap always wins for networks without convolutions (a loop pays Python and autograd
# overhead per client for little arithmetic). With convolutions, vmap runs one grouped
# convolution over the clients' weights, which CPU kernels do less efficiently than S
# ordinary ones, so once a client has enough rows to amortise the loop's overhead (about 10
# here) the loop is as fast or faster. Rule: loop for convolutional networks with at least
# LOOP_MIN_ROWS rows per client, vmap otherwise. When other processes load the 2 cores,
# both paths slow down by up to 10x with 2 threads and the loop more (its many small
# kernels wait for cores): the small CNN at 20 x 20 then measured 1.35-1.75 in favour of
# vmap; the rule follows the quiet figures. On a GPU the loop is never taken (bound by
# kernel launches: 1.16 to 405 times slower than vmap, measured below).
#
# Sequential convolutional networks (fs.models.cnn, fs.models.vgg_small, user nets of the
# same layers) take neither on CPU: the "stacked" path runs the clients as one network
# whose grouped convolutions are laid out channels-last, where oneDNN runs them at about
# the speed of one convolution of the merged batch. Small CNN, 20 x 20, one grad call,
# 1 thread, alternated on the busy 2-core machine: stacked 269 ms, loop 321 ms, vmap
# 422 ms; 2 threads: 790 / 3,291 / 1,731 ms.
#
# ResNet-20 (fs.models.resnet20) stacks too, block by block (._stacked_resnet). One grad
# call, 20 clients on 1 x 32 x 32 images, the three paths alternated (best of 2,
# benchmarks/bench_models_grad.py), 2 threads on the idle 2-core machine:
#
#   rows per client          4      8     12     32
#   batch norm  stacked    187    368    554  1,419 ms
#               loop       354    501    725  2,300
#               vmap       268    456    888  4,144
#   group norm  stacked    169    458    498  1,325
#               loop       316    534    617  1,501
#               vmap       221    414    764  4,158
#
# With 1 thread (and two other runs loading the cores) stacked led as well but for group
# norm at 32 rows, where the loop was 14% faster (3,616 against 4,212 ms). On smaller
# images vmap is the faster one with few rows (2 threads, batch norm):
#
#   image, clients x rows     8 x 8: 20 x 4  50 x 2  20 x 8   16 x 16: 20 x 4  50 x 2  20 x 8
#   stacked                        66     141      63                109     222     154 ms
#   vmap                           61     113      92                 90     178     190
#
# So on images of at least STACKED_MIN_PIXELS pixels ResNet-20 runs stacked (1.1-1.6x
# faster than the path chosen before in 7 of the 8 cases, 10% slower for group norm at 8
# rows); smaller images keep the rule above.
#
# On a GPU (an H100, torch 2.11, the same script with --device cuda) stacked was the
# fastest path in all 25 shapes of the script where the network stacks (6 of them on 8 x 8
# and 16 x 16 images), at 0.41 to 0.73 of vmap's time (the small CNN at 20 x 20: 3.7 ms
# against 5.1; ResNet-20 BN at 8 x 8, 20 x 4: 16.4 against 33.3; group norm at 32 x 32,
# 20 x 4: 20.8 against 45.7), so a GPU takes stacked whenever the network stacks and vmap
# otherwise (the MLP: vmap 2.9 ms, loop 118 ms at 100 x 20).
LOOP_MIN_ROWS = 12
STACKED_MIN_PIXELS = 32 * 32


def auto_path(X: torch.Tensor, has_conv: bool, stack: str | None = None) -> str:
    """The path for client data ``X`` (S, b, ...) (measured rules above). ``stack``:
    ``"sequential"`` or ``"residual"`` when the network runs stacked, else None."""
    if X.device.type != "cpu":
        return "vmap" if stack is None else "stacked"
    if stack == "sequential" or (stack == "residual"
                                 and X.shape[-2] * X.shape[-1] >= STACKED_MIN_PIXELS):
        return "stacked"
    return "loop" if has_conv and X.shape[1] >= LOOP_MIN_ROWS else "vmap"


#: The chunk of every client.
EVERY = slice(None)


def chunks(S: int, solo: torch.Tensor | None, step: int):
    """The chunks of at most ``step`` of the S clients that run vectorised: ``EVERY``
    when that is all of them at once, else slices, or (with batch statistics, ``solo``
    (S,) marking the clients that run alone) index tensors of the others."""
    if solo is None:
        return [EVERY] if step >= S else [slice(a, a + step) for a in range(0, S, step)]
    regular = torch.nonzero(~solo).reshape(-1)
    if regular.numel() == S and step >= S:
        return [EVERY]
    return [regular[a:a + step] for a in range(0, regular.numel(), step)]


def placed(t: torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``t`` on ``device`` in ``dtype``; ``t`` itself, without a dispatched call, when it
    is already."""
    return t if t.dtype == dtype and t.device == device else t.to(device=device, dtype=dtype)
