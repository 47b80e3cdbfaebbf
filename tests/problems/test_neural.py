import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fedsparse as fs
import fedsparse.models as models
from fedsparse._validation import ConfigError
from fedsparse.problems._neural_paths import auto_path
from fedsparse.problems.neural import NeuralProblem
from fedsparse.problems.neural_spec import neural_from_spec
from fedsparse.problems.protocol import proximal_term

F64 = torch.float64


def _conv_net(norm):
    """A small conv net with a batch-statistics (or per-example) norm layer."""
    layer = (nn.BatchNorm2d(3, track_running_stats=False) if norm == "batch"
             else nn.GroupNorm(1, 3))
    return nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), layer, nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3 * 4 * 4, 3))


# Tiny models of every kind, with their feature shapes (fast on CPU). ResNet-20 has tests
# of its own (test_resnet20_grad_matches_autograd, test_stacked_resnet20_...): its 60 layers
# make every call slow.
TINY = {
    "mlp": (lambda: models.mlp(6, (5,), 3), (6,)),
    "cnn": (lambda: models.cnn(1, 3, 8, channels=(2, 3), hidden=4), (1, 8, 8)),
    "bn": (lambda: _conv_net("batch"), (1, 8, 8)),
    "gn": (lambda: _conv_net("group"), (1, 8, 8)),
}


def _batch(shape, S=3, b=5, classes=3, seed=0, uneven=False):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(S, b, *shape, generator=g, dtype=F64)
    y = torch.randint(0, classes, (S, b), generator=g).to(F64)
    w = torch.rand(S, b, generator=g, dtype=F64) + 0.1
    if uneven:  # client s has b - s real rows (the rest weight 0)
        w = w * (torch.arange(b)[None, :] < (b - torch.arange(S))[:, None])
    return X, y, w / w.sum(-1, keepdim=True)


def _params(problem, S, seed=0):
    return torch.stack([problem.init_params(seed=seed + s, dtype=F64) for s in range(S)])


def _reference(build, params, X, y, w):
    """Loss and gradient of each client with its own nn.Module and plain autograd."""
    losses, grads = [], []
    for i in range(X.shape[0]):
        net = build().double()
        torch.func.replace_all_batch_norm_modules_(net)
        nn.utils.vector_to_parameters(params[i], net.parameters())
        real = w[i] > 0
        ce = F.cross_entropy(net(X[i][real]), y[i][real].long(), reduction="none")
        loss = (w[i][real] * ce).sum()
        loss.backward()
        losses.append(loss.detach())
        grads.append(torch.cat([p.grad.reshape(-1) for p in net.parameters()]))
    return torch.stack(losses), torch.stack(grads)


@pytest.mark.parametrize("kind", list(TINY))
@pytest.mark.parametrize("path", ["auto", "vmap", "loop", "stacked"])
@pytest.mark.parametrize("models", ["per client", "shared", "chunks of two"])
def test_loss_and_accuracy_from_one_forward_pass_are_loss_and_accuracy(kind, path, models):
    # evaluation takes both from one forward pass: the same bits as the two calls, with
    # batch statistics (clients with padding rows run alone) and in chunks of clients
    build, shape = TINY[kind]
    if path == "stacked" and kind == "mlp":
        pytest.skip("an MLP has no convolutions to stack")
    problem = fs.problems.neural(build(), path=path,
                                 chunk_clients=2 if models == "chunks of two" else None)
    X, y, w = _batch(shape, S=5, uneven=True, seed=3)
    params = _params(problem, 5)
    params = params[0] if models == "shared" else params
    loss, accuracy = problem.loss_and_accuracy(params, X, y, w)
    assert loss.shape == accuracy.shape == (5,)
    assert torch.equal(loss, problem.loss(params, X, y, w))
    assert torch.equal(accuracy, problem.accuracy(params, X, y, w))


@pytest.mark.parametrize("kind", list(TINY))
@pytest.mark.parametrize("path", ["vmap", "loop"])
def test_grad_matches_autograd_on_per_client_modules(kind, path):
    build, shape = TINY[kind]
    problem = fs.problems.neural(build(), path=path)
    X, y, w = _batch(shape, uneven=True)
    params = _params(problem, 3)
    loss, grad = _reference(build, params, X, y, w)
    assert torch.allclose(problem.loss(params, X, y, w), loss, atol=1e-12)
    assert torch.allclose(problem.grad(params, X, y, w), grad, atol=1e-10)


@pytest.mark.parametrize("kind", ["cnn", "bn", "gn"])
def test_stacked_path_matches_autograd_on_per_client_modules(kind):
    # The clients as one network with grouped convolutions, also with uneven clients
    # (batch norm then runs those alone) and one shared model.
    build, shape = TINY[kind]
    problem = fs.problems.neural(build(), path="stacked")
    X, y, w = _batch(shape, S=4, uneven=True)
    params = _params(problem, 4)
    loss, grad = _reference(build, params, X, y, w)
    assert torch.allclose(problem.loss(params, X, y, w), loss, atol=1e-12)
    assert torch.allclose(problem.grad(params, X, y, w), grad, atol=1e-10)
    shared = problem.grad(params[0], X, y, w)
    assert torch.allclose(shared, problem.grad(params[0].expand(4, -1), X, y, w), atol=1e-12)
    auto = fs.problems.neural(build())
    assert auto._method(X) == "stacked"  # the CPU's choice for sequential conv nets
    correct = problem.accuracy(params, X, y, w)
    assert torch.equal(correct, fs.problems.neural(build(), path="loop").accuracy(
        params, X, y, w))


def test_stacked_path_runs_vgg_and_refuses_what_it_cannot_stack():
    build = lambda: models.vgg_small(3, 2, 32)  # noqa: E731
    problem = fs.problems.neural(build(), path="stacked")
    X, y, w = _batch((2, 32, 32), S=2, b=2)
    params = _params(problem, 2)
    loss, grad = _reference(build, params, X, y, w)
    assert torch.allclose(problem.grad(params, X, y, w), grad, atol=1e-10)
    altered = models.resnet20(3, 1)
    altered.fc = nn.Sequential(nn.Linear(64, 3))  # not the network ResNet-20's stack knows
    for net in (models.mlp(4, (3,), 2), altered,
                nn.Sequential(nn.Conv2d(1, 2, 3, padding_mode="circular", padding=1),
                              nn.Flatten(), nn.Linear(2 * 4 * 4, 2))):
        with pytest.raises(ConfigError, match="path='stacked'"):
            fs.problems.neural(net, path="stacked")


@pytest.mark.parametrize("shortcut,norm", [("conv", "batch"), ("pad", "group"),
                                           ("pad", "batch")])
def test_stacked_resnet20_matches_autograd_on_per_client_modules(shortcut, norm):
    # Residual blocks stacked: every client's loss and gradient are its own network's,
    # with even clients (all three stacked) and uneven ones (batch norm runs those alone),
    # and option A's zero padding, which must pad each client's channels on their own (a
    # padding of the stacked channels as one block shifts all but one client's)
    def build():
        return models.resnet20(3, 2, shortcut=shortcut, norm=norm)

    problem = fs.problems.neural(build(), path="stacked")
    for uneven in (False, True):
        X, y, w = _batch((2, 8, 8), S=3, b=4, uneven=uneven)
        params = _params(problem, 3)
        loss, grad = _reference(build, params, X, y, w)
        assert torch.allclose(problem.loss(params, X, y, w), loss, atol=1e-12)
        assert torch.allclose(problem.grad(params, X, y, w), grad, atol=1e-10)
        assert torch.equal(problem.accuracy(params, X, y, w), fs.problems.neural(
            build(), path="loop").accuracy(params, X, y, w))


def test_auto_path_runs_resnet20_stacked_on_32_by_32_images():
    # The CPU's measured rule: stacked on 32 x 32 images (was vmap under 12 rows a client,
    # the loop from 12); smaller images keep the rule of the other networks
    auto = fs.problems.neural(models.resnet20(3, 1))
    assert auto._method(torch.zeros(2, 4, 1, 32, 32)) == "stacked"
    assert auto._method(torch.zeros(2, 32, 1, 32, 32)) == "stacked"
    assert auto._method(torch.zeros(2, 11, 1, 16, 16)) == "vmap"
    assert auto._method(torch.zeros(2, 12, 1, 16, 16)) == "loop"

    class Wider(models.zoo.ResNet20):  # a subclass may change forward: not stacked
        pass

    assert fs.problems.neural(Wider(3, 1, "conv", "batch"))._method(
        torch.zeros(2, 4, 1, 32, 32)) == "vmap"


def test_auto_path_on_a_gpu_runs_every_network_that_stacks_stacked():
    # Measured on an H100: stacked beat vmap for every network that stacks, at every image
    # size (the CPU's vmap/loop rule for small images does not apply there). The rule reads
    # only the device type, so tensors on the "meta" device stand in for a GPU's.
    on_gpu = torch.zeros(2, 4, 1, 8, 8, device="meta")
    assert auto_path(on_gpu, has_conv=True, stack="residual") == "stacked"
    assert auto_path(on_gpu, has_conv=True, stack="sequential") == "stacked"
    assert auto_path(on_gpu, has_conv=True, stack=None) == "vmap"
    assert auto_path(torch.zeros(2, 32, 784, device="meta"), has_conv=False) == "vmap"
    # the same data on the CPU keeps the CPU's rule: vmap for ResNet-20 on 8 x 8 images
    assert auto_path(torch.zeros(2, 4, 1, 8, 8), has_conv=True, stack="residual") == "vmap"
    cnn = fs.problems.neural(models.cnn(image_size=8, channels=(2, 3), hidden=4))
    assert cnn._method(torch.zeros(2, 4, 1, 8, 8, device="meta")) == "stacked"


@pytest.mark.parametrize("shortcut,norm", [("conv", "batch"), ("pad", "group")])
def test_resnet20_grad_matches_autograd(shortcut, norm):
    def build():
        return models.resnet20(3, 1, shortcut=shortcut, norm=norm)

    problem = fs.problems.neural(build(), path="vmap")  # "auto" runs it stacked here
    X, y, w = _batch((1, 8, 8), S=2, b=3, uneven=True)
    params = _params(problem, 2)
    loss, grad = _reference(build, params, X, y, w)
    assert torch.allclose(problem.loss(params, X, y, w), loss, atol=1e-12)
    assert torch.allclose(problem.grad(params, X, y, w), grad, atol=1e-10)


@pytest.mark.parametrize("kind", list(TINY))
def test_vmap_and_loop_paths_agree(kind):
    build, shape = TINY[kind]
    module = build()
    vm = fs.problems.neural(module, path="vmap")
    lp = fs.problems.neural(module, path="loop")
    X, y, w = _batch(shape, S=4, b=6)
    params = _params(vm, 4)
    for method in ("loss", "grad", "accuracy"):
        a, b = getattr(vm, method)(params, X, y, w), getattr(lp, method)(params, X, y, w)
        assert torch.allclose(a, b, atol=1e-6, rtol=0), method
    # The automatic choice is one of the two.
    auto = fs.problems.neural(module).grad(params, X, y, w)
    assert torch.allclose(auto, lp.grad(params, X, y, w), atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", ["mlp", "bn"])
def test_chunking_clients_does_not_change_results(kind):
    build, shape = TINY[kind]
    module = build()
    whole = fs.problems.neural(module)
    X, y, w = _batch(shape, S=5, b=6, uneven=True)
    params = _params(whole, 5)
    g, loss = whole.grad(params, X, y, w), whole.loss(params, X, y, w)
    for chunk in (1, 2):
        part = fs.problems.neural(module, chunk_clients=chunk)
        assert torch.allclose(part.grad(params, X, y, w), g, atol=1e-12, rtol=0)
        assert torch.allclose(part.loss(params, X, y, w), loss, atol=1e-12, rtol=0)
    # Calling on groups of clients gives the same rows as calling on all of them.
    split = torch.cat([whole.grad(params[s], X[s], y[s], w[s])
                       for s in (slice(0, 2), slice(2, 5))])
    assert torch.allclose(split, g, atol=1e-12, rtol=0)


@pytest.mark.parametrize("kind", ["mlp", "bn"])
def test_shared_params_equal_expanded_params(kind):
    build, shape = TINY[kind]
    problem = fs.problems.neural(build())
    X, y, w = _batch(shape)
    x = problem.init_params(seed=3, dtype=F64)
    for method in ("loss", "grad", "accuracy"):
        shared = getattr(problem, method)(x, X, y, w)
        expanded = getattr(problem, method)(x.expand(3, -1), X, y, w)
        assert torch.allclose(shared, expanded, atol=1e-12, rtol=0), method


@pytest.mark.parametrize("path", ["vmap", "loop"])
def test_padding_rows_never_enter_batch_statistics(path):
    build, shape = TINY["bn"]
    problem = fs.problems.neural(build(), path=path)
    X, y, w = _batch(shape, S=2, b=4)
    params = _params(problem, 2)
    junk = 50.0 * torch.randn(2, 3, *shape, dtype=F64) + 7.0
    Xp = torch.cat([X, junk], 1)
    yp = torch.cat([y, torch.full((2, 3), 2.0, dtype=F64)], 1)
    wp = torch.cat([w, torch.zeros(2, 3, dtype=F64)], 1)
    wp[1, 4:] = 0.0
    Xp[1, 4:], yp[1, 4:] = X[1, :0].sum() + 1.0, 0.0   # client 1: padded with ones
    for method in ("loss", "grad", "accuracy"):
        clean = getattr(problem, method)(params, X, y, w)
        padded = getattr(problem, method)(params, Xp, yp, wp)
        assert torch.allclose(padded, clean, atol=1e-12, rtol=0), method
    # The check could fail: the junk rows change a client's batch statistics (and so its
    # loss on the real rows) as soon as they are counted as real.
    wj = wp.clone()
    wj[0, 4:] = 1e-12
    assert not torch.allclose(problem.loss(params, Xp, yp, wj)[0],
                              problem.loss(params, X, y, w)[0], atol=1e-3)


def test_per_example_models_ignore_junk_padding():
    build, shape = TINY["gn"]
    problem = fs.problems.neural(build())
    X, y, w = _batch(shape, S=2, b=3)
    params = _params(problem, 2)
    Xp = torch.cat([X, 1e4 * torch.ones(2, 2, *shape, dtype=F64)], 1)
    yp = torch.cat([y, torch.zeros(2, 2, dtype=F64)], 1)
    wp = torch.cat([w, torch.zeros(2, 2, dtype=F64)], 1)
    assert torch.allclose(problem.grad(params, Xp, yp, wp), problem.grad(params, X, y, w),
                          atol=1e-12, rtol=0)


def test_client_with_no_real_rows_has_zero_loss_and_gradient():
    problem = fs.problems.neural(TINY["bn"][0]())
    X, y, w = _batch((1, 8, 8), S=2, b=3)
    w[1] = 0.0
    params = _params(problem, 2)
    assert problem.loss(params, X, y, w)[1] == 0
    assert not problem.grad(params, X, y, w)[1].any()


def test_loss_is_differentiable_and_matches_grad():
    problem = fs.problems.neural(TINY["cnn"][0]())
    X, y, w = _batch((1, 8, 8))
    params = _params(problem, 3).requires_grad_(True)
    problem.loss(params, X, y, w).sum().backward()
    assert torch.allclose(params.grad, problem.grad(params.detach(), X, y, w), atol=1e-12)


def test_accuracy_on_a_hand_made_case():
    # Logits (x0 - x1, 0): class 0 iff x0 > x1.
    net = nn.Linear(2, 2)
    problem = fs.problems.neural(net)
    x = torch.tensor([1.0, -1.0, 0.0, 0.0, 0.0, 0.0], dtype=F64)   # weight rows, then bias
    X = torch.tensor([[[2.0, 1.0], [0.0, 3.0], [5.0, -1.0]],
                      [[1.0, 4.0], [2.0, 2.5], [0.0, 0.0]]], dtype=F64)
    y = torch.tensor([[0.0, 0.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)
    w = torch.tensor([[0.5, 0.25, 0.25], [0.2, 0.8, 0.0]], dtype=F64)
    # Client 0: right, wrong, wrong -> 0.5. Client 1: right, right, (padding) -> 1.0.
    assert torch.equal(problem.accuracy(x, X, y, w), torch.tensor([0.5, 1.0], dtype=F64))
    # The loss on that case is the cross-entropy of logits (x0 - x1, 0), by hand.
    z = X[..., 0] - X[..., 1]
    ce = torch.where(y == 0, F.softplus(-z), F.softplus(z))
    assert torch.allclose(problem.loss(x, X, y, w), (w * ce).sum(-1), atol=1e-14)


def test_example_metrics_consistent_with_loss_and_accuracy():
    problem = fs.problems.neural(TINY["cnn"][0]())
    X, y, w = _batch((1, 8, 8), S=1, b=7)
    x = problem.init_params(seed=1, dtype=F64)
    loss, correct = problem.example_metrics(x, X[0], y[0])
    assert loss.shape == (7,) and correct.dtype == torch.bool
    assert torch.allclose((w[0] * loss).sum(), problem.loss(x, X, y, w)[0], atol=1e-14)
    assert torch.allclose((w[0] * correct).sum(), problem.accuracy(x, X, y, w)[0])


@pytest.mark.parametrize("problem,classes", [
    (fs.problems.least_squares(), None),
    (fs.problems.logistic(), 2),
    (fs.problems.logistic(l2=0.3), 2),
    (fs.problems.softmax(num_classes=4), 4),
    (fs.problems.softmax(num_classes=4, l2=0.1), 4),
])
def test_linear_example_metrics_match_loss_and_accuracy(problem, classes):
    g = torch.Generator().manual_seed(0)
    d, n = 5, 9
    X = torch.randn(n, d, generator=g, dtype=F64)
    y = (torch.randn(n, generator=g, dtype=F64) if classes is None
         else torch.randint(0, classes, (n,), generator=g).to(F64))
    w = torch.rand(n, generator=g, dtype=F64)
    w = w / w.sum()
    x = torch.randn(problem.param_dim(d), generator=g, dtype=F64)
    loss, correct = problem.example_metrics(x, X, y)
    assert loss.shape == (n,)
    assert torch.allclose((w * loss).sum(), problem.loss(x, X[None], y[None], w[None])[0],
                          atol=1e-13)
    acc = problem.accuracy(x, X[None], y[None], w[None])
    if classes is None:
        assert correct is None and acc is None
    else:
        assert correct.dtype == torch.bool
        assert torch.allclose((w * correct).sum(), acc[0], atol=1e-14)


def test_linear_problems_layout_init_and_pooled_flag():
    problem = fs.problems.softmax(num_classes=3)
    layout = problem.layout(4)
    assert layout.size == 12 and layout.prunable.all()
    assert not problem.pooled_ok and fs.problems.neural(nn.Linear(2, 2)).pooled_ok
    assert torch.equal(problem.init_params(4, 0, F64), torch.zeros(12, dtype=F64))


def test_init_params_is_seeded_and_leaves_the_global_rng_alone():
    problem = fs.problems.neural(models.resnet20(10, 1))
    state = torch.get_rng_state()
    a = problem.init_params(seed=5, dtype=torch.float32)
    b = problem.init_params(seed=5, dtype=torch.float32)
    c = problem.init_params(seed=6, dtype=torch.float32)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == (272_186,) and a.dtype == torch.float32
    assert torch.equal(problem.init_params(seed=5, dtype=F64), a.to(F64))
    # ResNet-20's own scheme has the last word: norm weights 1 and biases 0.
    layout = problem.layout()
    assert torch.equal(a[layout.slice("norm.weight")], torch.ones(16))
    assert torch.equal(a[layout.slice("blocks.8.norm2.bias")], torch.zeros(64))
    # Two problems built from differently initialised modules agree for the same seed.
    other = fs.problems.neural(models.resnet20(10, 1))
    assert torch.equal(other.init_params(seed=5, dtype=torch.float32), a)


def test_init_params_takes_the_seed_first_and_refuses_a_stray_feature_dim():
    # init_params(1) once put the 1 into an ignored feature_dim and returned the seed-0 model.
    problem = fs.problems.neural(models.mlp(6, (5,), 3))
    one = problem.init_params(seed=1)
    assert torch.equal(problem.init_params(1), one)
    assert not torch.equal(problem.init_params(1), problem.init_params(0))
    assert torch.equal(problem.init_params(1, F64), one.to(F64))
    # The generic interface's feature_dim is checked against what the network reads.
    assert torch.equal(problem.init_params(seed=1, feature_dim=6), one)
    with pytest.raises(ConfigError, match=r"feature_dim.*7.*init_params\(seed\)"):
        problem.init_params(feature_dim=7)
    conv = fs.problems.neural(TINY["cnn"][0]())
    conv.init_params(seed=0, feature_dim=64)  # 1 x 8 x 8 images
    with pytest.raises(ConfigError, match="feature_dim"):
        conv.init_params(feature_dim=1)
    with pytest.raises(ConfigError, match="dtype"):
        problem.init_params(1, 2)
    # Once the data is seen, only its number of features is accepted.
    data = fs.data.from_arrays([torch.randn(4, 6)], [torch.tensor([0.0, 1, 2, 0])])
    problem.check_data(data)
    with pytest.raises(ConfigError, match=r"feature shape is \(6,\)"):
        problem.init_params(feature_dim=5)
    # The simulator's generic call gives the data's feature count and the run's seed.
    algo = fs.algorithms.fed_avg(step_size=0.1, local_steps=1, batch_size=2).bind(problem, data)
    assert torch.equal(algo.init(problem, seed=1)["model"], problem.init_params(1, data.dtype))


def test_init_params_is_the_same_in_another_process():
    x = fs.problems.neural(models.mlp(60, (20,), 10)).init_params(seed=11, dtype=F64)
    code = ("import fedsparse as fs, fedsparse.models as m, torch;"
            "p = fs.problems.neural(m.mlp(60, (20,), 10));"
            "x = p.init_params(seed=11, dtype=torch.float64);"
            "print(repr(x.sum().item()), repr(x.abs().max().item()), x.numel())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [repr(x.sum().item()), repr(x.abs().max().item()), "1430"]


def test_dtype_follows_params():
    problem = fs.problems.neural(TINY["mlp"][0]())
    X, y, w = _batch((6,))
    x32 = problem.init_params(seed=0, dtype=torch.float32)
    assert problem.grad(x32.expand(3, -1), X, y, w).dtype == torch.float32
    assert problem.loss(x32.to(F64), X.float(), y, w).dtype == F64


def test_user_batch_norm_module_is_copied_not_changed():
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    problem = fs.problems.neural(net, path="vmap")
    assert net[1].running_mean is not None and net[1].track_running_stats
    X, y, w = _batch((4,), S=2, b=4, classes=2)
    params = _params(problem, 2)
    before = net[1].running_mean.clone()
    assert torch.isfinite(problem.grad(params, X, y, w)).all()
    assert torch.equal(net[1].running_mean, before)


def _data(xs, ys):
    return fs.data.from_arrays(xs, ys)


def test_check_data_sets_classes_and_shape():
    problem = fs.problems.neural(models.mlp(6, (4,), 3))
    g = torch.Generator().manual_seed(0)
    data = _data([torch.randn(5, 6, generator=g)] * 2, [torch.tensor([0., 1, 2, 1, 0])] * 2)
    problem.check_data(data)
    assert problem.num_classes == 3 and problem.feature_shape == (6,)


@pytest.mark.parametrize("labels,match", [
    ([0.0, 1, 3, 1, 0], r"labels \[3.0\]"),
    ([0.0, 1, -1, 1, 0], r"labels \[-1.0\]"),
    ([0.0, 1, 0.5, 1, 0], r"labels \[0.5\]"),
])
def test_check_data_rejects_bad_labels(labels, match):
    problem = fs.problems.neural(models.mlp(6, (4,), 3))
    data = _data([torch.randn(5, 6)] * 2, [torch.tensor(labels)] * 2)
    with pytest.raises(ConfigError, match=match + r".*integers in \[0, 3\)"):
        problem.check_data(data)


@pytest.mark.parametrize("module,name", [
    (models.mlp(784, (10,), 3), "Sequential"),
    (models.resnet20(3, 1), "ResNet20"),
])
def test_check_data_rejects_a_feature_shape_the_model_rejects(module, name):
    problem = fs.problems.neural(module)
    data = _data([torch.randn(5, 6)] * 2, [torch.zeros(5)] * 2)
    with pytest.raises(ConfigError, match=rf"feature_shape=\(6,\) is invalid: the model {name}"):
        problem.check_data(data)


def test_check_data_rejects_a_model_without_class_logits():
    problem = fs.problems.neural(nn.Linear(6, 1))
    data = _data([torch.randn(5, 6)] * 2, [torch.zeros(5)] * 2)
    with pytest.raises(ConfigError, match="num_classes >= 2"):
        problem.check_data(data)


def test_bad_modules_are_rejected_when_building():
    with pytest.raises(ConfigError, match="module='str' is invalid"):
        fs.problems.neural("mlp")
    with pytest.raises(ConfigError, match="module='ReLU' is invalid: has no trainable"):
        fs.problems.neural(nn.ReLU())
    frozen = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ConfigError, match="no trainable parameters"):
        fs.problems.neural(frozen)
    with pytest.raises(ConfigError, match="path='fast'"):
        fs.problems.neural(nn.Linear(2, 2), path="fast")
    with pytest.raises(ConfigError, match="dtype"):
        fs.problems.neural(nn.Linear(2, 2), dtype=torch.int64)


def test_bad_call_shapes_are_clear_errors():
    problem = fs.problems.neural(nn.Linear(2, 3))
    X, y, w = torch.zeros(2, 4, 2), torch.zeros(2, 4), torch.full((2, 4), 0.25)
    with pytest.raises(ConfigError, match=r"params=\(5,\) is invalid.*P=9"):
        problem.loss(torch.zeros(5), X, y, w)
    with pytest.raises(ConfigError, match="shapes do not match"):
        problem.grad(torch.zeros(3, 9), X, y, w)
    with pytest.raises(ConfigError, match="Lipschitz"):
        problem.lipschitz(X, w)


def test_problem_attributes():
    problem = fs.problems.neural(models.mlp(784, (100,), 10))
    assert isinstance(problem, NeuralProblem)
    assert problem.param_dim(784) == 79_510 and problem.layout(784).size == 79_510
    assert problem.task == "classification" and problem.blocks == 1
    assert problem.capabilities == {"grad", "neural"} and problem.num_classes == 10
    assert repr(problem) == "NeuralProblem(Sequential, P=79510)"


def test_neural_from_spec():
    problem = neural_from_spec({"kind": "mlp", "hidden": [100]}, feature_shape=(1, 28, 28),
                               num_classes=10)
    assert problem.param_dim() == 79_510
    res = neural_from_spec({"kind": "resnet20", "shortcut": "pad"}, feature_shape=(3, 32, 32),
                           num_classes=10)
    assert res.param_dim() == 269_722
    vgg = neural_from_spec({"kind": "vgg_small"}, feature_shape=(1, 32, 32), num_classes=100)
    assert vgg.param_dim() == 257_924 - 2 * 16 * 9
    with pytest.raises(ConfigError, match="model.kind='lenet'"):
        neural_from_spec({"kind": "lenet"})
    with pytest.raises(ConfigError, match=r"unknown keys.*\['depth'\]|\['depth'\].*unknown"):
        neural_from_spec({"kind": "mlp", "depth": 3}, feature_shape=(4,))
    with pytest.raises(ConfigError, match="needs in_features"):
        neural_from_spec({"kind": "mlp"}, num_classes=3)
    with pytest.raises(ConfigError, match=r"feature_shape=\(784,\).*channels, height, width"):
        neural_from_spec({"kind": "cnn"}, feature_shape=(784,))
    with pytest.raises(ConfigError, match="model="):
        neural_from_spec("mlp")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_on_cuda_like_on_cpu():
    build, shape = TINY["bn"]
    problem = fs.problems.neural(build())
    X, y, w = _batch(shape, uneven=True)
    params = _params(problem, 3)
    cpu = problem.grad(params, X, y, w)
    gpu = problem.grad(params.cuda(), X.cuda(), y.cuda(), w.cuda())
    assert gpu.device.type == "cuda"
    assert torch.allclose(gpu.cpu(), cpu, atol=1e-8)
    loss, _ = problem.example_metrics(params[0].cuda(), X[0].cuda(), y[0].cuda())
    assert loss.device.type == "cuda"


@pytest.mark.parametrize("hidden", [(), (7,), (6, 5)])
@pytest.mark.parametrize("shared", [False, True])
def test_closed_form_mlp_gradient_matches_autograd(hidden, shared):
    gen = torch.Generator().manual_seed(3)
    fast = fs.problems.neural(models.mlp(12, hidden, 4), path="mlp")
    slow = fs.problems.neural(models.mlp(12, hidden, 4), path="vmap")
    P = fast.param_dim()
    params = torch.randn(P if shared else (3, P), generator=gen, dtype=F64)
    X = torch.randn(3, 5, 1, 3, 4, generator=gen, dtype=F64)   # image-shaped: flattened
    y = torch.randint(0, 4, (3, 5), generator=gen).to(F64)
    w = torch.rand(3, 5, generator=gen, dtype=F64)
    w[1, 3:] = 0                                                # padding rows
    torch.testing.assert_close(fast.grad(params, X, y, w), slow.grad(params, X, y, w),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("layout", ["rows at an offset", "one row expanded", "every second "
                                    "column", "column-major", "chunks of two"])
def test_closed_form_mlp_reads_parameters_in_any_memory_layout(layout):
    # The closed form reads each layer's weights and bias as strided views of the
    # parameters' memory (offset, row and column strides): the same gradient as vmap
    # for every layout a caller or a chunk of clients can hand it
    gen = torch.Generator().manual_seed(4)
    fast = fs.problems.neural(models.mlp(12, (6, 5), 4), path="mlp",
                              chunk_clients=2 if layout == "chunks of two" else None)
    slow = fs.problems.neural(models.mlp(12, (6, 5), 4), path="vmap")
    P, S = fast.param_dim(), 3
    store = torch.randn(2 * S, 2 * P, generator=gen, dtype=F64)
    params = {"rows at an offset": store[2:2 + S, :P], "one row expanded":
              store[1, :P].expand(S, -1), "every second column": store[:S, ::2],
              "column-major": store[:S, :P].t().contiguous().t(),
              "chunks of two": store[:S, P:]}[layout]
    X = torch.randn(S, 5, 12, generator=gen, dtype=F64)
    y = torch.randint(0, 4, (S, 5), generator=gen).to(F64)
    w = torch.rand(S, 5, generator=gen, dtype=F64)
    torch.testing.assert_close(fast.grad(params, X, y, w),
                               slow.grad(params.contiguous(), X, y, w), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("anchor", [None, "shared", "per client"])
@pytest.mark.parametrize("layout", ["float32", "float64", "chunks of two", "rows at an offset"])
def test_a_step_in_place_is_the_gradient_step_bit_for_bit(layout, anchor):
    # The closed form subtracts each layer's gradient block (and FedProx's proximal
    # term) from its slice of the parameters instead of writing the whole gradient
    # first: the same bits as local SGD's step on the whole gradient, in place
    dtype = F64 if layout == "float64" else torch.float32
    gen = torch.Generator().manual_seed(5)
    problem = fs.problems.neural(models.mlp(12, (6, 5), 4), dtype=dtype,
                                 chunk_clients=2 if layout == "chunks of two" else None)
    P, S = problem.param_dim(), 3
    store = torch.randn(S + 2, P, generator=gen, dtype=dtype)
    params = store[2:] if layout == "rows at an offset" else store[:S].clone()
    X = torch.randn(S, 5, 12, generator=gen, dtype=dtype)
    y = torch.randint(0, 4, (S, 5), generator=gen).to(dtype)
    w = torch.rand(S, 5, generator=gen, dtype=dtype)
    mu, pull = (0.0, None) if anchor is None else (0.7, torch.randn(
        (P,) if anchor == "shared" else (S, P), generator=gen, dtype=dtype))
    g = problem.grad(params, X, y, w)
    if mu:
        g.add_(params - pull, alpha=mu)
    expected = params.clone().sub_(g, alpha=0.3)
    before = store.clone()
    stepped = problem.descend_(params, X, y, w, 0.3, term=proximal_term(params, mu, pull))
    assert stepped is params and torch.equal(params, expected)
    if layout == "rows at an offset":  # the rows outside the view are left alone
        assert torch.equal(store[:2], before[:2])


def test_a_network_without_the_closed_form_steps_by_its_gradient():
    gen = torch.Generator().manual_seed(6)
    cnn = fs.problems.neural(models.cnn(1, 3, 8, channels=(2, 4), hidden=8), dtype=F64)

    class Scaled(NeuralProblem):  # a user's subclass with its own gradient
        def grad(self, params, X, y, w):
            return 2 * super().grad(params, X, y, w)

    mlp = Scaled(models.mlp(64, (5,), 3), dtype=F64)
    for problem in (cnn, mlp):
        params = _params(problem, 2)
        X = torch.randn(2, 4, 1, 8, 8, generator=gen, dtype=F64)
        y = torch.randint(0, 3, (2, 4), generator=gen).to(F64)
        w = torch.full((2, 4), 0.25, dtype=F64)
        expected = params.clone().sub_(problem.grad(params, X, y, w), alpha=0.1)
        assert torch.equal(problem.descend_(params, X, y, w, 0.1), expected)


def test_an_mlp_with_a_parameter_outside_its_layers_takes_the_general_path():
    # The closed form writes the gradient of its layers' parameters only: a Sequential
    # holding one more (registered beside the layers) must not take it
    module = models.mlp(12, (7,), 4)
    module.register_parameter("temperature", nn.Parameter(torch.ones(1)))
    auto = fs.problems.neural(module)
    assert auto._mlp is None
    with pytest.raises(ConfigError, match="path='mlp'"):
        fs.problems.neural(module, path="mlp")
    assert fs.problems.neural(models.mlp(12, (7,), 4))._mlp is not None


@pytest.mark.parametrize("build, shape", [
    (lambda: models.mlp(6, (5,), 3), (6,)),
    (lambda: models.cnn(1, 3, 8), (1, 8, 8)),
    (lambda: models.resnet20(3), (3, 8, 8)),
])
def test_a_network_with_a_frozen_parameter_trains_the_others(build, shape):
    # A frozen layer (a pretrained part kept fixed) is not in the flat vector: the
    # closed-form and stacked paths, which read every layer from it, must not take it
    module = build()
    first = next(module.parameters())
    first.requires_grad_(False)
    kept = first.detach().clone()
    problem = fs.problems.neural(module)
    assert problem.param_dim() == sum(p.numel() for p in module.parameters()) - kept.numel()
    X, y, w = _batch(shape, S=2)
    params = _params(problem, 2)
    loop = fs.problems.neural(module, path="loop")
    assert torch.allclose(problem.grad(params, X, y, w), loop.grad(params, X, y, w),
                          atol=1e-10)
    frozen = [p for p in problem.module.parameters() if not p.requires_grad]
    assert len(frozen) == 1 and torch.equal(frozen[0], kept)
    for path in ("mlp", "stacked"):
        with pytest.raises(ConfigError, match=f"path='{path}'.*frozen"):
            fs.problems.neural(module, path=path)


def test_the_mlp_path_needs_an_mlp():
    with pytest.raises(ConfigError, match="path='mlp'"):
        fs.problems.neural(models.cnn(1, 10, 28), path="mlp")


class _ReadsAValue(nn.Module):
    """A forward with data-dependent control flow: fine one client at a time."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 3)

    def forward(self, x):
        if x.abs().sum().item() > 1e9:
            x = torch.zeros_like(x)
        return self.linear(x)


class _CountsCalls(nn.Module):
    """A forward that updates a buffer in place."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 3)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls += 1
        return self.linear(x)


class _Noisy(nn.Module):
    """A forward that draws random numbers."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 3)

    def forward(self, x):
        return self.linear(x) + 0.01 * torch.randn(1)


@pytest.mark.parametrize("network,what", [
    (_ReadsAValue, "reads a tensor's value"),
    (_CountsCalls, "changes a tensor it holds in its forward"),
    (_Noisy, "draws random numbers in its forward"),
])
def test_a_forward_vmap_cannot_batch_says_to_take_the_loop_path(network, what):
    gen = torch.Generator().manual_seed(0)
    data = fs.data.from_arrays(list(torch.rand(4, 10, 6, generator=gen)),
                               list(torch.randint(0, 3, (4, 10), generator=gen)))
    algo = fs.algorithms.fed_avg(step_size=0.1, local_steps=2, batch_size=5)
    with pytest.raises(ConfigError, match=rf"{network.__name__} {what}.*path=\"loop\""):
        fs.simulate(algo, fs.problems.neural(network(), path="vmap"), data, rounds=1,
                    progress=False)
    h = fs.simulate(algo, fs.problems.neural(network(), path="loop"), data, rounds=1,
                    progress=False)
    assert len(h.records) == 1


class _IntegerOffset(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 3)
        self.offset = nn.Parameter(torch.ones(3, dtype=torch.long), requires_grad=False)

    def forward(self, x):
        return self.linear(x) + self.offset


def test_a_network_fedsparse_cannot_copy_or_train_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"module='Sequential' is invalid: has tensors with "
                       r"no values \('0\.weight' is on the meta device\)"):
        fs.problems.neural(nn.Sequential(nn.Linear(6, 3, device="meta")))
    with pytest.raises(ConfigError, match=r"module='_IntegerOffset' .*parameter 'offset' of "
                       r"dtype int64: .*register_buffer"):
        fs.problems.neural(_IntegerOffset())


def test_an_mlp_too_large_for_memory_is_refused_before_it_is_allocated():
    with pytest.raises(ConfigError, match=r"hidden\[0\]=10000000 .*needs about 364 TiB for "
                       r"the network's float32 parameters"):
        models.mlp(6, (10**7, 10**7), 3)


class _IntegerLogits(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 3)

    def forward(self, x):
        return self.linear(x).long()


def test_a_network_whose_logits_are_integers_is_refused_before_training():
    gen = torch.Generator().manual_seed(0)
    data = fs.data.from_arrays(list(torch.rand(2, 4, 6, generator=gen)),
                               list(torch.randint(0, 3, (2, 4), generator=gen)))
    with pytest.raises(ConfigError, match=r"module='_IntegerLogits' is invalid: returns logits "
                       "of dtype int64"):
        fs.problems.neural(_IntegerLogits()).check_data(data)
