"""Chunk sizes come from the device's memory, and never change results."""

import pytest
import torch

import fedsparse as fs
import fedsparse._memory as memory
import fedsparse.models as models
from fedsparse._validation import ConfigError
from fedsparse.simulate import _auto_client_batch

F64 = torch.float64


def test_cpu_budget_is_a_capped_fraction_of_the_available_ram(monkeypatch):
    budget = memory.memory_budget("cpu")
    assert memory.MIN_BUDGET <= budget <= memory.CPU_CAP
    assert memory.memory_budget(None) == pytest.approx(budget, rel=0.2)
    monkeypatch.setattr(memory, "_available_ram", lambda: 1 << 30)
    monkeypatch.setattr(memory, "_cgroup_free", lambda: None)
    assert memory.memory_budget(torch.device("cpu")) == int((1 << 30) * memory.CPU_FRACTION)
    monkeypatch.setattr(memory, "_available_ram", lambda: 1 << 40)
    assert memory.memory_budget("cpu") == memory.CPU_CAP
    monkeypatch.setattr(memory, "_available_ram", lambda: 1 << 20)
    assert memory.memory_budget("cpu") == memory.MIN_BUDGET
    monkeypatch.setattr(memory, "_cgroup_free", lambda: 1 << 30)
    monkeypatch.setattr(memory, "_available_ram", lambda: 1 << 40)
    assert memory.memory_budget("cpu") == int((1 << 30) * memory.CPU_FRACTION)


def test_budget_refuses_a_device_it_cannot_read():
    with pytest.raises(ConfigError, match="device"):
        memory.memory_budget("toaster")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="needs a CUDA GPU"):
            memory.memory_budget("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_budget_is_a_fraction_of_free_memory():
    free, _ = torch.cuda.mem_get_info()
    budget = memory.memory_budget("cuda")
    assert memory.MIN_BUDGET <= budget <= max(memory.MIN_BUDGET, free)


def test_items_per_chunk_and_client_chunk(monkeypatch):
    assert memory.items_per_chunk(10, 95) == 9
    assert memory.items_per_chunk(10, 5) == 1  # one item always runs
    assert memory.items_per_chunk(0, 5, at_most=3) == 3
    monkeypatch.setattr(memory, "memory_budget", lambda device=None: 1000)
    assert memory.client_chunk(100, "cpu") == 10
    assert memory.client_chunk(100, "cpu", share=0.5, clients=3) == 3
    assert memory.eval_chunk(300, "cpu", examples=100) == 3
    with pytest.raises(ConfigError, match="share"):
        memory.client_chunk(100, share=0)


def test_neural_chunks_follow_the_budget_and_keep_results(monkeypatch):
    build = lambda: models.cnn(1, 3, 8, channels=(2, 3), hidden=4)  # noqa: E731
    g = torch.Generator().manual_seed(0)
    X = torch.randn(7, 4, 1, 8, 8, generator=g, dtype=F64)
    y = torch.randint(0, 3, (7, 4), generator=g).to(F64)
    w = torch.full((7, 4), 0.25, dtype=F64)
    whole = fs.problems.neural(build(), path="vmap")
    params = torch.stack([whole.init_params(s, F64) for s in range(7)])
    reference = whole.grad(params, X, y, w)
    assert whole._chunk(X) >= 7  # the real budget holds these tiny clients
    need = whole.client_bytes(4, (1, 8, 8), 8)
    assert need > 8 * 3 * whole.param_dim()
    monkeypatch.setattr(memory, "memory_budget", lambda device=None: 2 * need)
    small = fs.problems.neural(build(), path="vmap")
    assert small._chunk(X) == 2
    torch.testing.assert_close(small.grad(params, X, y, w), reference, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(small.loss(params, X, y, w), whole.loss(params, X, y, w),
                               rtol=1e-12, atol=1e-14)
    # Evaluation of one model in parts of the budget: the same per-example numbers.
    monkeypatch.setattr(memory, "memory_budget", lambda device=None: 1)
    flat = X.reshape(28, 1, 8, 8)
    parts = small.example_metrics(params[0], flat, y.reshape(-1))
    monkeypatch.undo()
    full = whole.example_metrics(params[0], flat, y.reshape(-1))
    torch.testing.assert_close(parts[0], full[0], rtol=1e-12, atol=1e-14)
    assert torch.equal(parts[1], full[1])


def test_simulate_sizes_client_batch_from_the_budget(monkeypatch):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(6, 10, 5, generator=g)
    y = torch.randint(0, 3, (6, 10), generator=g).float()
    data = fs.data.from_arrays(list(X), list(y)).to(F64)
    problem = fs.problems.neural(models.mlp(5, (4,), 3))
    algo = fs.algorithms.fed_avg(step_size=0.1, local_steps=2, batch_size=4)
    run = lambda **kw: fs.simulate(algo, problem, data, rounds=2, seed=3, **kw)  # noqa: E731
    assert _auto_client_batch(problem, data, 6) is None  # tiny clients: all at once
    reference = run()
    P = problem.param_dim()
    per_client = 8 * (8 * P + 10 * 5)
    monkeypatch.setattr(memory, "memory_budget", lambda device=None: 2 * 2 * per_client)
    assert _auto_client_batch(problem, data, 6) == 2
    chunked = run()
    explicit = run(client_batch=4)
    for h in (chunked, explicit):
        assert [r["objective"] for r in h.records] == \
            [r["objective"] for r in reference.records]
        assert torch.equal(h.model, reference.model)


def test_keep_freed_memory_nests_and_restores(monkeypatch):
    calls = []

    class Libc:
        def mallopt(self, what, value):
            calls.append((what, value))
            return 1

        def malloc_trim(self, pad):
            calls.append(("trim", pad))

    monkeypatch.setattr(memory, "_glibc", lambda: Libc())
    with memory.keep_freed_memory():
        with memory.keep_freed_memory():  # nested: acts once
            assert torch.ones(3).sum() == 3
        assert len(calls) == 2
    assert calls[:2] == [(-3, memory._KEEP_BELOW), (-1, memory._KEEP_FREE)]
    assert calls[2:] == [(-1, 64 << 20), (-3, 32 << 20), ("trim", 0)]
    assert memory._keeping[0] == 0
    monkeypatch.undo()
    with memory.keep_freed_memory():  # the real allocator (or nothing off glibc)
        x = torch.zeros(1 << 22)
        del x
