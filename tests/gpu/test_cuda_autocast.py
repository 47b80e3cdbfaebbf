"""The opt-in bfloat16 forward (``neural(..., autocast="bf16")``) on a GPU: the networks of
the paper-scale runs take it on the path a GPU's ``"auto"`` picks (stacked), their gradients
stay float32 and point where the float32 ones do, and the problem's evaluation is left in
float32. The CPU's form of these checks is ``tests/problems/test_neural_autocast.py``."""

from __future__ import annotations

import pytest
import torch

import fedsparse as fs

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

#: Cosine of the bfloat16 gradient with the float32 one, per client, at least. Batch norm
#: over a freshly initialised ResNet-20 is ill-conditioned (on the CPU, rounding only the
#: input to bfloat16 moves its float64 gradient by 16%), so it gets a looser bound.
NETWORKS = {
    "small CNN": (lambda: fs.models.cnn(1, 10, 28), (1, 28, 28), 0.99),
    "ResNet-20, group norm": (lambda: fs.models.resnet20(10, 1, norm="group"), (1, 32, 32),
                              0.99),
    "ResNet-20, batch norm": (lambda: fs.models.resnet20(10, 1), (1, 32, 32), 0.9),
}


@pytest.mark.parametrize("name", list(NETWORKS))
def test_the_bf16_gradient_on_the_gpu_points_where_the_float32_one_does(name):
    build, shape, cosine_at_least = NETWORKS[name]
    gen = torch.Generator().manual_seed(0)
    S, b = 4, 16
    X = torch.randn(S, b, *shape, generator=gen).cuda()
    y = torch.randint(0, 10, (S, b), generator=gen).float().cuda()
    w = torch.full((S, b), 1.0 / b, device="cuda")
    net = build()
    full, low = fs.problems.neural(net), fs.problems.neural(net, autocast="bf16")
    assert low._method(X) == "stacked"
    p = full.init_params(0).cuda()
    g32, g16 = full.grad(p, X, y, w), low.grad(p, X, y, w)
    assert g16.dtype == torch.float32 and torch.isfinite(g16).all()
    assert not torch.equal(g16, g32)
    cosine = torch.nn.functional.cosine_similarity(g16, g32, dim=1)
    assert cosine.min() >= cosine_at_least, cosine
    assert torch.equal(full.loss(p, X, y, w), low.loss(p, X, y, w))
