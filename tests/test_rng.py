import torch

from fedsparse import rng


def test_uniform_is_deterministic_in_range_and_roughly_uniform():
    u = rng.uniform(7, rng.BATCH, 3, torch.arange(100_000))
    assert torch.equal(u, rng.uniform(7, rng.BATCH, 3, torch.arange(100_000)))
    assert (u >= 0).all() and (u < 1).all()
    assert abs(float(u.mean()) - 0.5) < 0.01
    assert abs(float((u < 0.1).double().mean()) - 0.1) < 0.01
    # a different seed or counter gives different numbers
    assert not torch.equal(u, rng.uniform(8, rng.BATCH, 3, torch.arange(100_000)))


def test_a_clients_draw_does_not_depend_on_the_other_clients():
    all_keys = rng.uniform(0, rng.BATCH, 5, torch.arange(10)[:, None], 0, torch.arange(6))
    some = rng.uniform(0, rng.BATCH, 5, torch.tensor([3, 7])[:, None], 0, torch.arange(6))
    assert torch.equal(all_keys[[3, 7]], some)


def test_choose_without_replacement():
    keys = rng.uniform(0, 1, torch.arange(4)[:, None], torch.arange(10))
    valid = torch.arange(10)[None, :] < torch.tensor([10, 5, 2, 10])[:, None]
    idx, picked = rng.choose_without_replacement(keys, valid, 4)
    for row in range(4):
        chosen = idx[row][picked[row]].tolist()
        assert len(set(chosen)) == len(chosen)
        assert all(valid[row, j] for j in chosen)
    assert picked.sum(1).tolist() == [4, 4, 2, 4]


def _tensor_hash(*counters):
    """The hash with every counter a tensor (how every counter was hashed before the
    leading Python ints were folded in Python)."""
    h = torch.zeros((), dtype=torch.int64)
    for c in counters:
        h = rng._mix(h ^ torch.as_tensor(c, dtype=torch.int64))
    return h


def test_leading_python_ints_hash_to_the_bits_of_the_tensor_path():
    # seeds, streams and rounds are hashed in Python; the keys must not move by one bit,
    # or every run's mini-batches, samples and drops would change
    gen = torch.Generator().manual_seed(0)
    edges = [0, 1, -1, 2**63 - 1, -2**63, 2**62 + 12345, rng.BATCH]
    clients = torch.arange(-3, 40).reshape(-1, 1)
    positions = torch.arange(7).reshape(1, -1)
    for trial in range(200):
        ints = [edges[trial % len(edges)],
                *torch.randint(-2**62, 2**62, (2,), generator=gen).tolist()]
        for counters in (ints, [*ints, clients], [*ints, clients, trial, positions],
                         [clients, *ints], [ints[0], positions, ints[1]]):
            assert torch.equal(rng.hash_counters(*counters), _tensor_hash(*counters))
    assert rng.hash_counters(3, True).dtype == torch.int64
    assert torch.equal(rng.hash_counters(3, True), _tensor_hash(3, 1))


def test_no_tensor_is_made_from_python_ints_beside_a_tensor_counter():
    # on a GPU, a tensor made from the folded key (or from an int after a tensor) is a copy
    # to the device, which makes the host wait for the device's queue at every draw
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    clients, positions = torch.arange(5)[:, None], torch.arange(4)[None, :]
    with Recorder() as recorder:
        keys = rng.hash_counters(7, rng.BATCH, 3, clients, 2, positions)
    assert torch.equal(keys, _tensor_hash(7, rng.BATCH, 3, clients, 2, positions))
    assert not [op for op in recorder.ops if "lift_fresh" in op], recorder.ops
