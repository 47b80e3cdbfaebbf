import math

import pytest
import torch
from torch import nn

import fedsparse.models as models
from fedsparse._validation import ConfigError
from fedsparse.models import ParamLayout, count_parameters


@pytest.mark.parametrize("build,count", [
    (lambda: models.mlp(784, (100,), 10), 79_510),
    (lambda: models.mlp(60, (20,), 10), 1_430),
    (lambda: models.mlp(784, (), 10), 7_850),
    (lambda: models.cnn(), 215_370),
    (lambda: models.cnn(channels=(32, 64), hidden=512), 1_663_370),
    (lambda: models.vgg_small(10), 246_314),
    (lambda: models.vgg_small(100), 257_924),
    (lambda: models.resnet20(), 272_474),
    (lambda: models.resnet20(shortcut="pad"), 269_722),
    (lambda: models.resnet20(in_channels=1), 272_186),
    (lambda: models.resnet20(norm="group"), 272_474),
])
def test_parameter_counts(build, count):
    net = build()
    assert count_parameters(net) == count
    assert ParamLayout.from_module(net).size == count


@pytest.mark.parametrize("net,shape", [
    (models.mlp(12, (5, 4), 3), (12,)),
    (models.mlp(12, (5,), 3), (3, 2, 2)),              # images are flattened
    (models.cnn(2, 3, 9, channels=(2, 3), hidden=4), (2, 9, 9)),
    (models.vgg_small(3, 1, 32, batch_norm=True), (1, 32, 32)),
    (models.resnet20(3, 1, shortcut="pad"), (1, 8, 8)),
    (models.resnet20(3, 2, norm="group"), (2, 8, 8)),
])
def test_forward_gives_logits(net, shape):
    out = net(torch.randn(4, *shape))
    assert out.shape == (4, 3) and torch.isfinite(out).all()


def test_resnet20_prunable_entries_and_init():
    net = models.resnet20()
    layout = ParamLayout.from_module(net)
    assert int(layout.prunable.sum()) == 270_896
    assert int(ParamLayout.from_module(models.resnet20(shortcut="pad")).prunable.sum()) \
        == 268_336
    norms = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(norms) == 21                       # 1 stem + 18 in blocks + 2 shortcuts
    for m in norms:
        assert torch.equal(m.weight, torch.ones_like(m.weight))
        assert torch.equal(m.bias, torch.zeros_like(m.bias))
        assert not m.track_running_stats and m.running_mean is None   # static BN
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert all(m.bias is None for m in convs)
    # Kaiming-normal (fan in, ReLU gain): std sqrt(2 / fan_in) on the widest convolution.
    w = net.blocks[-1].conv2.weight
    assert abs(float(w.detach().std()) / math.sqrt(2 / (64 * 9)) - 1) < 0.05


def test_group_norm_option_has_two_groups_and_no_batch_norm():
    net = models.resnet20(norm="group")
    assert not any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    assert {m.num_groups for m in net.modules() if isinstance(m, nn.GroupNorm)} == {2}


def test_pad_shortcut_subsamples_and_zero_pads():
    net = models.resnet20(shortcut="pad")
    block = net.blocks[3]                          # first block of stage 2: 16 -> 32
    x = torch.randn(2, 16, 8, 8)
    out = block.shortcut(x)
    assert out.shape == (2, 32, 4, 4)
    assert torch.equal(out[:, 8:24], x[:, :, ::2, ::2])
    assert torch.equal(out[:, :8], torch.zeros(2, 8, 4, 4))


def test_layout_prunable_only_conv_and_linear_weights():
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.GroupNorm(1, 2), nn.Flatten(),
                        nn.LayerNorm(8), nn.Linear(8, 3), nn.Conv1d(1, 1, 2, bias=False))
    layout = ParamLayout.from_module(net)
    expected = {"0.weight": True, "0.bias": False, "1.weight": False, "1.bias": False,
                "2.weight": False, "2.bias": False, "4.weight": False, "4.bias": False,
                "5.weight": True, "5.bias": False, "6.weight": True}
    assert layout.names == tuple(expected)
    for i, (name, flag) in enumerate(expected.items()):
        piece = layout.slice(name)
        assert (layout.prunable[piece] == flag).all(), name
        assert (layout.layer[piece] == i).all()
    assert layout.offsets[-1] == layout.size == count_parameters(net)
    assert int(layout.prunable.sum()) == 18 + 24 + 2


def test_layout_skips_frozen_parameters():
    net = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2))
    net[0].weight.requires_grad_(False)
    layout = ParamLayout.from_module(net)
    assert layout.names == ("0.bias", "1.weight", "1.bias") and layout.size == 2 + 4 + 2


def test_unflatten_views_and_flatten_round_trip():
    net = models.cnn(1, 3, 8, channels=(2, 2), hidden=3)
    layout = ParamLayout.from_module(net)
    flat = torch.arange(2 * layout.size, dtype=torch.float64).reshape(2, layout.size)
    parts = layout.unflatten(flat)
    assert list(parts) == list(layout.names)
    for (name, p), shape in zip(net.named_parameters(), layout.shapes, strict=True):
        assert parts[name].shape == (2, *p.shape) and tuple(p.shape) == shape
    assert torch.equal(parts["0.weight"][1].reshape(-1),
                       flat[1, layout.slice("0.weight")])
    parts["0.bias"][0, 1] = -1.0                   # a view: writes reach the flat vector
    assert flat[0, layout.slice("0.bias").start + 1] == -1.0
    assert torch.equal(layout.flatten(parts), flat)
    assert torch.equal(layout.flatten(list(parts.values())), flat)
    # The flat vector of a module is parameters() order.
    vec = nn.utils.parameters_to_vector(net.parameters())
    assert torch.equal(layout.flatten(dict(net.named_parameters())), vec)


def test_layout_errors():
    layout = ParamLayout.from_module(nn.Linear(3, 2))
    with pytest.raises(ConfigError, match="name='nope'"):
        layout.slice("nope")
    with pytest.raises(ConfigError, match="missing"):
        layout.flatten({"weight": torch.zeros(2, 3)})
    with pytest.raises(ConfigError, match="must end with shape"):
        layout.flatten({"weight": torch.zeros(3, 2), "bias": torch.zeros(2)})
    with pytest.raises(ConfigError, match="leading dimensions"):
        layout.flatten({"weight": torch.zeros(4, 2, 3), "bias": torch.zeros(2)})
    with pytest.raises(ConfigError, match="last dimension 8"):
        layout.unflatten(torch.zeros(7))
    with pytest.raises(ConfigError, match="module"):
        ParamLayout.from_module("not a module")
    with pytest.raises(ConfigError, match="lazy"):
        ParamLayout.from_module(nn.LazyLinear(3))
    with pytest.raises(ConfigError, match="P=0"):
        ParamLayout.dense(0)


def test_dense_layout():
    layout = ParamLayout.dense(5)
    assert layout.size == 5 and layout.names == ("weight",) and layout.prunable.all()
    assert torch.equal(layout.layer, torch.zeros(5, dtype=torch.int64))
    assert torch.equal(layout.unflatten(torch.arange(5.0))["weight"], torch.arange(5.0))


@pytest.mark.parametrize("call,match", [
    (lambda: models.mlp(784, 100, 10), "hidden=100"),
    (lambda: models.mlp(784, (100, 0), 10), r"hidden\[1\]=0"),
    (lambda: models.mlp(0, (10,), 10), "in_features=0"),
    (lambda: models.mlp(4, (10,), 1), "num_classes=1"),
    (lambda: models.cnn(channels=(8,)), "channels"),
    (lambda: models.cnn(image_size=3), "image_size=3"),
    (lambda: models.vgg_small(10, image_size=16), "image_size=16"),
    (lambda: models.vgg_small(10, batch_norm="yes"), "batch_norm"),
    (lambda: models.resnet20(shortcut="identity"), "shortcut='identity'"),
    (lambda: models.resnet20(norm="layer"), "norm='layer'"),
    (lambda: models.resnet20(in_channels=0), "in_channels=0"),
])
def test_bad_arguments_are_clear_errors(call, match):
    with pytest.raises(ConfigError, match=match):
        call()


def test_registry_builds_every_model():
    assert set(models.REGISTRY) == {"mlp", "cnn", "vgg_small", "resnet20"}
    assert models.REGISTRY["mlp"] is models.mlp
