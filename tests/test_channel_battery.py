"""One battery over every channel kind, beside the algorithm battery (test_conformance):
answers, determinism, independence of the co-sampled clients, delivery rates, the
fingerprint a checkpoint keeps, and checkpoint/resume."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fedsparse as fs
from fedsparse import rng
from fedsparse._validation import ConfigError
from fedsparse.channels import (
    BernoulliChannel,
    GroupChannel,
    PerfectChannel,
    ScheduledChannel,
    checked_channel,
    safari_channel,
)

N = 12
GROUPS = [0] * 4 + [1] * 4 + [2] * 4
VOLATILE = {"seconds", "elapsed"}


def rising(round, clients):
    """A per-round probability: 0.2 in round 0, rising by 0.1 a round up to 0.9."""
    return torch.full((clients.shape[0],), min(0.9, 0.2 + 0.1 * round), dtype=torch.float64)


def build(kind: str):
    """The channel of each kind the battery runs."""
    return {
        "perfect": lambda: PerfectChannel(),
        "bernoulli": lambda: BernoulliChannel(0.6),
        "bernoulli-per-client": lambda: BernoulliChannel(torch.linspace(0.1, 0.9, N)),
        "bernoulli-callable": lambda: BernoulliChannel(rising),
        "scheduled": lambda: ScheduledChannel(
            torch.rand(5, N, generator=torch.Generator().manual_seed(0)) > 0.4, cycle=True),
        "group": lambda: GroupChannel(BernoulliChannel(0.3), GROUPS),
        "safari": lambda: safari_channel(0.6, GROUPS),
        "safari-asymmetric": lambda: safari_channel("asymmetric", GROUPS),
    }[kind]()


KINDS = ["perfect", "bernoulli", "bernoulli-per-client", "bernoulli-callable", "scheduled",
         "group", "safari", "safari-asymmetric"]
GROUPED = {"group", "safari", "safari-asymmetric"}
RANDOM = set(KINDS) - {"perfect", "scheduled"}


@pytest.mark.parametrize("kind", KINDS)
def test_an_answer_is_one_fate_per_sampled_client_and_repeatable(kind):
    channel = build(kind)
    for t in range(4):
        clients = torch.tensor([0, 3, 5, 6, 11])
        out = channel.delivered(7, t, clients)
        assert out.dtype == torch.bool and out.shape == (5,)
        assert torch.equal(out, build(kind).delivered(7, t, clients.clone()))


@pytest.mark.parametrize("kind", sorted(set(KINDS) - GROUPED))
def test_a_fate_does_not_depend_on_who_else_was_sampled(kind):
    channel = build(kind)
    for t in range(6):
        everyone = channel.delivered(3, t, torch.arange(N))
        some = torch.tensor([1, 4, 9])
        assert torch.equal(channel.delivered(3, t, some), everyone[some])


@pytest.mark.parametrize("kind", sorted(GROUPED))
def test_every_sampled_group_gets_an_upload_through(kind):
    channel = build(kind)
    groups = torch.tensor(GROUPS)
    assert channel.delivered(0, 0, torch.arange(N)).all()  # the first round is full
    forced = 0
    for t in range(1, 200):
        clients = torch.tensor([0, 1, 5, 9, 10])
        out = channel.delivered(11, t, clients)
        for g in groups[clients].unique():
            assert out[groups[clients] == g].any(), f"round {t}: group {int(g)} got nothing"
        base = channel.channel.delivered(11, t, clients)
        forced += int(out.sum() - base.sum())
    assert forced > 0  # the guarantee did act, not only the base channel's luck


@pytest.mark.parametrize("kind", sorted(RANDOM - GROUPED))
def test_the_delivery_rate_is_the_probability(kind):
    channel = build(kind)
    rounds = 3000
    fates = torch.stack([channel.delivered(5, t, torch.arange(N))
                         for t in range(rounds)]).double()
    if kind == "bernoulli-callable":  # p = 0.2 + 0.1 t, capped at 0.9 from round 7
        early, late = fates[:2].mean(), fates[7:].mean()
        assert abs(float(late) - 0.9) < 5 * (0.9 * 0.1 / fates[7:].numel()) ** 0.5
        assert float(early) < 0.6
        return
    expected = {"bernoulli": torch.full((N,), 0.6, dtype=torch.float64),
                "bernoulli-per-client": torch.linspace(0.1, 0.9, N, dtype=torch.float64)}[kind]
    spread = (expected * (1 - expected) / rounds).sqrt()
    assert ((fates.mean(0) - expected).abs() < 5 * spread).all(), (fates.mean(0), expected)


@pytest.mark.parametrize("kind", sorted(RANDOM))
def test_the_seed_and_the_round_change_the_fates(kind):
    channel = build(kind)
    clients = torch.arange(N)
    by_seed = {tuple(channel.delivered(s, 5, clients).tolist()) for s in range(20)}
    by_round = {tuple(channel.delivered(0, t, clients).tolist()) for t in range(1, 21)}
    assert len(by_seed) > 1 and len(by_round) > 1


def test_the_fingerprint_tells_channels_apart_and_is_the_same_in_another_process():
    a = torch.full((5000,), 0.5, dtype=torch.float64)
    b = a.clone()
    b[2500] = 0.4  # torch's repr of either would show "..." over this entry
    reprs = [repr(BernoulliChannel(a)), repr(BernoulliChannel(b)),
             repr(BernoulliChannel(rising)), repr(BernoulliChannel(lambda r, c: rising(r, c))),
             repr(GroupChannel(BernoulliChannel(0.5), [0] * 3000)),
             repr(GroupChannel(BernoulliChannel(0.5), [0] * 2999 + [1]))]
    assert len(set(reprs)) == len(reprs)
    assert "0x" not in repr(BernoulliChannel(rising))  # no memory address
    # two fresh processes (not this one: pytest rewrites this module's code)
    script = ("import sys; sys.path.insert(0, sys.argv[1]); from test_channel_battery "
              "import build; print(repr(build('bernoulli-callable')))")
    seen = {subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent)],
                           capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert len(seen) == 1 and "<callable rising, sha1=" in seen.pop()


@pytest.mark.filterwarnings("ignore:round .* no upload was delivered")
@pytest.mark.parametrize("kind", KINDS)
def test_a_run_with_the_channel_resumes_into_the_same_history(kind, tmp_path):
    data = fs.data.shifted_gaussian(num_clients=N, samples_per_client=6, dim=8, sparsity=2,
                                    seed=0, dtype=torch.float64)
    algo = fs.algorithms.similarity_compensation(fs.algorithms.fed_avg(step_size=0.05,
                                                                       local_steps=2))
    kw = dict(rounds=6, seed=3, clients_per_round=6)
    whole = fs.simulate(algo, fs.problems.least_squares(), data, channel=build(kind), **kw)
    ckpt = tmp_path / "run.pt"
    fs.simulate(algo, fs.problems.least_squares(), data, channel=build(kind),
                **{**kw, "rounds": 3}, checkpoint=ckpt, checkpoint_every=1)
    resumed = fs.simulate(algo, fs.problems.least_squares(), data, channel=build(kind), **kw,
                          checkpoint=ckpt, resume=True)
    assert torch.equal(resumed.model, whole.model)
    strip = [{k: v for k, v in r.items() if k not in VOLATILE} for r in whole.records]
    assert [{k: v for k, v in r.items() if k not in VOLATILE} for r in resumed.records] == strip
    if kind != "perfect":
        assert sum(r["delivered"] for r in whole.records) < 6 * 6  # something was lost


def test_a_group_channel_forces_one_arrival_only_in_a_group_without_one():
    # Mao et al. 2022: "each group has at least one client each round"; a group with an
    # arrival keeps the base channel's fates, a group without gets exactly one member
    base = BernoulliChannel(0.3)
    channel = GroupChannel(base, GROUPS, full_first_round=False)
    groups = torch.tensor(GROUPS)
    clients = torch.arange(len(GROUPS))
    forced = kept = 0
    for seed in range(20):
        for round in range(5):
            fates = base.delivered(seed, round, clients)
            out = channel.delivered(seed, round, clients)
            for g in range(3):
                members = groups == g
                if fates[members].any():
                    assert torch.equal(out[members], fates[members])
                    kept += 1
                else:
                    assert int(out[members].sum()) == 1
                    forced += 1
    assert forced > 0 and kept > 0  # both branches were exercised


def test_a_probability_callable_may_answer_one_number_for_every_sampled_client():
    clients = torch.tensor([0, 1, 2])
    always = BernoulliChannel(lambda round, clients: 1.0).delivered(0, 1, clients)
    never = BernoulliChannel(lambda round, clients: 0.0).delivered(0, 1, clients)
    assert always.tolist() == [True, True, True]  # a key in [0, 1) is always < 1
    assert never.tolist() == [False, False, False]  # and never < 0


def test_per_client_probabilities_name_a_sampled_client_without_one():
    # two values are for clients 0 and 1: client 2 has none
    with pytest.raises(ConfigError, match=r"client 2 has none"):
        BernoulliChannel([0.5, 0.5]).delivered(0, 0, torch.tensor([0, 2]))


def test_a_probability_of_one_is_allowed_and_always_delivers():
    clients = torch.tensor([0, 1, 2])
    assert BernoulliChannel(1.0).delivered(0, 0, clients).tolist() == [True, True, True]
    # per client: 1 always arrives, 0 never does
    assert BernoulliChannel([1.0, 0.0, 1.0]).delivered(3, 2, clients).tolist() == \
        [True, False, True]


def test_a_group_channel_forces_the_member_with_the_smallest_second_key():
    # Nothing arrives through the base channel, so each group gets exactly one member:
    # the one whose key of the channel's stream with counter 1 is the group's smallest.
    channel = GroupChannel(ScheduledChannel([[False] * 6] * 2), [0, 0, 0, 1, 1, 1])
    clients = torch.arange(6)
    chosen = {}
    for seed in range(5):
        keys = rng.uniform(seed, rng.CHANNEL, 1, clients, 1)
        expected = [int(keys[:3].argmin()), 3 + int(keys[3:].argmin())]
        chosen[seed] = channel.delivered(seed, 1, clients).nonzero().flatten().tolist()
        assert chosen[seed] == expected
    assert chosen[0] == [0, 5] and chosen[1] == [1, 4]  # the keys of seeds 0 and 1


def test_a_group_channel_checks_its_base_channels_clients_too():
    # 4 group ids fit 4 clients, but the base channel's 5 per-client probabilities do not
    channel = GroupChannel(BernoulliChannel([0.5] * 5), [0, 0, 1, 1])
    with pytest.raises(ConfigError, match="5 per-client values"):
        checked_channel(channel, 4)


def test_the_asymmetric_safari_channel_has_the_papers_probabilities_exactly():
    # the lowest group id (0) gets P = 0.18, every other group 0.6, as float64 numbers
    p = safari_channel("asymmetric", [0, 0, 1, 1]).channel.probability
    assert p.dtype == torch.float64
    assert p.tolist() == [0.18, 0.18, 0.6, 0.6]
