"""The opt-in bfloat16 forward of a neural problem's gradients (``autocast="bf16"``): the
chain rule on bfloat16-rounded forward values computed by hand, the float32 parts left
float32, the refusals, and a run configured with it."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import fedsparse as fs
from fedsparse import ConfigError

D, C = 6, 3


def _bf16(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to bfloat16 and back to float32."""
    return t.bfloat16().float()


def _by_hand(p, X, y, w):
    """The gradient of ``sum_j w_j CE_j`` of one linear layer, forward in bfloat16: the
    inputs, weights and bias rounded to bfloat16, the logits (a float32 product) rounded
    to bfloat16 and then used in float32; the logits' gradient ``w_j (softmax - onehot)``
    rounded to bfloat16, the layer's gradients products of bfloat16 values rounded to
    bfloat16 (as the autocast linear layer's backward returns them)."""
    rows = []
    for i in range(X.shape[0]):
        W, b = p[i, :D * C].reshape(C, D), p[i, D * C:]
        Xq = _bf16(X[i])
        logits = _bf16(Xq @ _bf16(W).T + _bf16(b))
        onehot = torch.nn.functional.one_hot(y[i].long(), C)
        G = _bf16((torch.softmax(logits, -1) - onehot) * w[i, :, None])
        rows.append(torch.cat([_bf16(G.T @ Xq).reshape(-1), _bf16(G.sum(0))]))
    return torch.stack(rows)


def _clients(seed, S=3, b=5):
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(S, D * C + C, generator=g)
    X = torch.randn(S, b, D, generator=g)
    y = torch.randint(0, C, (S, b), generator=g).float()
    w = torch.rand(S, b, generator=g)
    return p, X, y, w / w.sum(1, keepdim=True)


@pytest.mark.parametrize("seed", range(5))
def test_one_linear_layer_gives_the_gradient_computed_by_hand(seed):
    p, X, y, w = _clients(seed)
    linear = nn.Sequential(nn.Linear(D, C))
    expected = _by_hand(p, X, y, w)
    loop = fs.problems.neural(linear, path="loop", autocast="bf16").grad(p, X, y, w)
    assert loop.dtype == torch.float32
    # Bit for bit here (every entry of 20 seeds); another CPU's bfloat16 products may
    # round an entry lying near a tie the other way, so a few may move by a rounding
    # step. A backward run under autocast matches 38% of the entries, float32 none.
    assert (loop == expected).float().mean() >= 0.95
    assert (loop - expected).abs().max() <= 2 ** -6 * expected.abs().max()
    # vmap's batched products round the logits in another order: bfloat16's precision
    vmapped = fs.problems.neural(linear, path="vmap", autocast="bf16").grad(p, X, y, w)
    assert (vmapped - expected).abs().max() <= 2 ** -6 * expected.abs().max()
    # and neither is the float32 gradient: the forward really ran in bfloat16
    full = fs.problems.neural(linear, path="loop").grad(p, X, y, w)
    assert not torch.equal(loop, full)
    torch.testing.assert_close(loop, full, rtol=0, atol=2 ** -5 * full.abs().max().item())


def _image_clients(S=3, b=6, side=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(S, b, 1, side, side, generator=g)
    y = torch.randint(0, 4, (S, b), generator=g).float()
    return X, y, torch.full((S, b), 1.0 / b)


@pytest.mark.parametrize("path", ["stacked", "vmap", "loop"])
def test_a_cnn_gradient_in_bf16_points_where_the_float32_one_does(path):
    net = fs.models.cnn(1, 4, 12, channels=(4, 8), hidden=16)
    X, y, w = _image_clients()
    full = fs.problems.neural(net, path=path)
    p = full.init_params(0).expand(3, -1).clone()
    g32 = full.grad(p, X, y, w)
    g16 = fs.problems.neural(net, path=path, autocast="bf16").grad(p, X, y, w)
    assert g16.dtype == torch.float32 and not torch.equal(g16, g32)
    cosine = torch.nn.functional.cosine_similarity(g16, g32, dim=1)
    assert cosine.min() > 0.99, cosine


def test_losses_and_accuracies_stay_float32():
    net = fs.models.cnn(1, 4, 12, channels=(4, 8), hidden=16)
    X, y, w = _image_clients()
    full, low = fs.problems.neural(net), fs.problems.neural(net, autocast="bf16")
    p = full.init_params(0)
    assert torch.equal(full.loss(p, X, y, w), low.loss(p, X, y, w))
    assert torch.equal(full.accuracy(p, X, y, w), low.accuracy(p, X, y, w))


def test_batch_norm_avoids_vmap_under_autocast():
    """torch's batch-norm backward under vmap refuses bfloat16 inputs with float32 weights:
    ``"auto"`` takes the stacked path (ResNet-20 on 8 x 8 images runs vmap on the CPU
    otherwise), an explicit ``"vmap"`` is refused naming the option."""
    net = fs.models.resnet20(in_channels=1, num_classes=4)
    X, y, w = _image_clients(S=2, b=4, side=8)
    auto = fs.problems.neural(net, autocast="bf16")
    assert fs.problems.neural(net)._method(X) == "vmap"
    assert auto._method(X) == "stacked"
    p = auto.init_params(0)
    assert torch.isfinite(auto.grad(p, X, y, w)).all()
    with pytest.raises(ConfigError, match="autocast='bf16' is invalid: cannot run .*vmap"):
        fs.problems.neural(net, path="vmap", autocast="bf16")


def test_the_refusals_name_the_option():
    mlp = fs.models.mlp(D, (4,), C)
    with pytest.raises(ConfigError, match="autocast='fp16' is invalid: must be one of None, "
                                          "'bf16'"):
        fs.problems.neural(mlp, autocast="fp16")
    with pytest.raises(ConfigError, match="path='mlp' is invalid: .*closed form"):
        fs.problems.neural(mlp, path="mlp", autocast="bf16")
    low = fs.problems.neural(mlp, autocast="bf16")
    assert low._mlp is None  # the float32 closed form is not taken
    p = low.init_params(0, dtype=torch.float64)
    X, y = torch.zeros(1, 2, D, dtype=torch.float64), torch.zeros(1, 2)
    with pytest.raises(ConfigError, match="autocast='bf16' is invalid: .*torch.float64: give "
                                          "dtype float32"):
        low.grad(p, X, y, torch.ones(1, 2, dtype=torch.float64))
    assert "autocast='bf16'" in repr(low)


_CONFIG = """
title = "bf16"
[defaults]
rounds = 3
seed = 0
clients_per_round = 4
[defaults.data]
kind = "fedprox_synthetic"
num_clients = 4
seed = 0
[defaults.problem]
kind = "neural"
model = { kind = "mlp", in_features = 60, hidden = [20], num_classes = 10 }
[defaults.algorithm]
kind = "fed_avg"
step_size = 0.05
local_steps = 4
batch_size = 10
[[runs]]
label = "float32"
[[runs]]
label = "bf16"
[runs.problem]
kind = "neural"
autocast = "bf16"
model = { kind = "mlp", in_features = 60, hidden = [20], num_classes = 10 }
"""


def test_a_config_turns_it_on_per_run_and_the_summary_says_so(tmp_path, cli):
    config = tmp_path / "bf16.toml"
    config.write_text(_CONFIG)
    code, _, err = cli.run(["run", str(config), "--out", str(tmp_path / "out"), "--quiet"])
    assert code == 0, err
    runs = {r["label"]: r for r in
            json.loads((tmp_path / "out" / "summary.json").read_text())["runs"]}
    assert runs["bf16"]["params"]["problem"]["autocast"] == "bf16"
    assert "autocast" not in runs["float32"]["params"]["problem"]
    histories = fs.load_run(tmp_path / "out")
    losses = [histories[label].column("objective") for label in ("float32", "bf16")]
    assert losses[0] != losses[1]  # the forward ran in bfloat16 ...
    assert losses[1][-1] < losses[1][0]  # ... and trained
    assert losses[1][-1] == pytest.approx(losses[0][-1], rel=0.02)


def test_a_float64_run_with_it_is_refused_before_any_run_starts(tmp_path, cli):
    config = tmp_path / "bf16.toml"
    config.write_text(_CONFIG.replace("[defaults]\n", '[defaults]\ndtype = "float64"\n'))
    cli.refused(["run", str(config), "--out", str(tmp_path / "out"), "--quiet"],
                "run 'bf16': autocast='bf16' is invalid")
    assert not (tmp_path / "out" / "float32").exists()  # the first run never started


def test_a_checkpoint_resumes_only_with_the_precision_it_was_written_with(tmp_path):
    data = fs.data.fedprox_synthetic(num_clients=3, seed=0)
    algorithm = fs.algorithms.fed_avg(step_size=0.05, local_steps=2, batch_size=10)
    net = fs.models.mlp(60, (8,), 10)
    ckpt = tmp_path / "run.pt"
    fs.simulate(algorithm, fs.problems.neural(net, autocast="bf16"), data, rounds=2,
                checkpoint=ckpt, checkpoint_every=1)
    with pytest.raises(ConfigError, match="problem"):
        fs.simulate(algorithm, fs.problems.neural(net), data, rounds=3, checkpoint=ckpt,
                    resume=True)
    resumed = fs.simulate(algorithm, fs.problems.neural(net, autocast="bf16"), data,
                          rounds=3, checkpoint=ckpt, resume=True)
    assert len(resumed.records) == 3
