"""Client state on disk (:mod:`fedsparse.client_store`): the same run as in memory."""

import gc
import tempfile

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse import client_store
from fedsparse._validation import ConfigError
from fedsparse.client_store import open_client_store
from fedsparse.models import mlp

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data(N=12):
    return fs.data.fedprox_synthetic(num_clients=N, seed=3, dim=10, num_classes=4)


PROBLEM = fs.problems.softmax(4)

STATEFUL = {
    "fedmac": lambda: fs.algorithms.fedmac(lam=0.1, step_size=0.05, personal_step_size=0.05,
                                           gamma=1e-3, local_steps=2, batch_size=5),
    "pfedme": lambda: fs.algorithms.pfedme(lam=0.5, step_size=0.05, personal_step_size=0.05,
                                           local_steps=2, batch_size=5),
    "per_fedavg": lambda: fs.algorithms.per_fedavg(step_size=0.05, inner_step_size=0.05,
                                                   local_steps=2, batch_size=5),
    "heur_fedamp": lambda: fs.algorithms.heur_fedamp(lam=0.1, alpha_k=0.1, sigma=1.0,
                                                     step_size=0.05, local_steps=2,
                                                     batch_size=5),
}


def _run(algo, data, **kw):
    return fs.simulate(algo, PROBLEM, data, rounds=kw.pop("rounds", 4), seed=1,
                       clients_per_round=kw.pop("clients_per_round", 5), progress=False, **kw)


def _steady(records):
    return [{k: v for k, v in r.items() if k not in ("seconds", "elapsed")} for r in records]


def _same(a, b):
    assert _steady(a.records) == _steady(b.records)
    assert _steady([a.initial]) == _steady([b.initial])
    assert torch.equal(a.model, b.model)
    assert torch.equal(a.personal_models, b.personal_models)


@pytest.mark.parametrize("name", sorted(STATEFUL))
def test_state_on_disk_gives_the_in_memory_history(name):
    data = _data()
    memory = _run(STATEFUL[name](), data)
    disk = _run(STATEFUL[name](), data, client_state_memory=0)
    _same(memory, disk)
    assert memory.records[-1]["personal_accuracy"] is not None
    sampled = _run(STATEFUL[name](), data, eval_clients=5)
    sampled_disk = _run(STATEFUL[name](), data, eval_clients=5, client_state_memory=0)
    _same(sampled, sampled_disk)


def test_fedspa_masks_on_disk_and_filled_a_chunk_at_a_time(monkeypatch):
    # FedSpa's masks are random per client: a store filled a few rows at a time must
    # hold what one init of all N clients gives
    monkeypatch.setattr(client_store, "COPY_BYTES", 3 * 60)  # about 3 clients per chunk
    problem = fs.problems.neural(mlp(10, (6,), 4))
    data = _data(10)
    algo = fs.algorithms.safari(density=0.5, pruner="fedspa", optimizer="sgd",
                                step_size=0.05, batch_size=5, local_steps=2)
    bound = algo.bind(problem, data)
    store = open_client_store(bound, problem, 10, seed=1, memory=0)
    assert store.on_disk and len(store.chunks()) > 2
    assert torch.equal(store.state["mask"], bound.init_clients(problem, torch.arange(10), 1)
                       ["mask"])
    kw = dict(rounds=3, seed=1, clients_per_round=4, progress=False)
    memory = fs.simulate(algo, problem, data, **kw)
    disk = fs.simulate(algo, problem, data, client_state_memory=0, **kw)
    assert _steady(memory.records) == _steady(disk.records)
    assert torch.equal(memory.model, disk.model)


def test_resume_with_state_on_disk_equals_the_straight_run(tmp_path):
    data = _data()
    straight = _run(STATEFUL["fedmac"](), data, rounds=6)
    ckpt = tmp_path / "run.pt"
    _run(STATEFUL["fedmac"](), data, rounds=3, checkpoint=ckpt, client_state_memory=0,
         client_state_dir=tmp_path / "clients")
    resumed = _run(STATEFUL["fedmac"](), data, rounds=6, checkpoint=ckpt, resume=True,
                   client_state_memory=0, client_state_dir=tmp_path / "clients")
    _same(straight, resumed)
    # the kept directory: NumPy files of the final state and of the personal models
    personal = np.load(tmp_path / "clients" / "personal_models.npy", mmap_mode="r")
    assert np.array_equal(personal, straight.personal_models.numpy())
    trained = np.load(tmp_path / "clients" / "trained.npy")
    assert trained.dtype == np.bool_ and trained.shape == (12,) and trained.any()
    state = np.load(tmp_path / "clients" / "personal.npy")
    assert np.array_equal(state[trained], personal[trained])


def test_a_damaged_checkpoint_is_refused_before_the_files_are_trusted(tmp_path):
    data = _data()
    ckpt = tmp_path / "run.pt"
    _run(STATEFUL["fedmac"](), data, rounds=2, checkpoint=ckpt, client_state_memory=0)
    state = torch.load(ckpt, weights_only=True)
    state["client_state"]["personal"][3, 0] = float("nan")
    fs.checkpoints.save_checkpoint(ckpt, state)
    with pytest.raises(ConfigError, match=r"client_state\['personal'\] holds 1 NaN"):
        _run(STATEFUL["fedmac"](), data, rounds=4, checkpoint=ckpt, resume=True,
             client_state_memory=0)


def test_the_temporary_directory_goes_with_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    history = _run(STATEFUL["pfedme"](), _data(), rounds=2, client_state_memory=0)
    gc.collect()
    assert not list(tmp_path.glob("fedsparse-clients-*"))
    # the personal models stay readable: their file is mapped, even though unlinked
    assert history.personal_models.shape == (12, PROBLEM.param_dim(10))
    assert torch.isfinite(history.personal_models).all()


def test_stateless_algorithms_keep_no_store():
    algo = fs.algorithms.fed_avg(step_size=0.1, local_steps=1).bind(PROBLEM, _data())
    assert open_client_store(algo, PROBLEM, 12, 0, memory=0).state is None


def test_bad_store_arguments_are_named(tmp_path):
    data, algo = _data(), STATEFUL["fedmac"]()
    with pytest.raises(ConfigError, match="client_state_memory=-1 is invalid"):
        _run(algo, data, client_state_memory=-1)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="client_state_dir=.*full.*new or empty"):
        _run(algo, data, client_state_dir=tmp_path / "full")
    with pytest.raises(ConfigError, match="client_state_dir=.*full.*new or empty"):
        _run(algo, data, client_state_dir=tmp_path / "full", resume=True,
             checkpoint=tmp_path / "none.pt")  # resuming: still not a foreign file
    assert (tmp_path / "full" / "mine.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="client_state_dir=.*must be a directory"):
        _run(algo, data, client_state_dir=tmp_path / "file")
    with pytest.raises(ConfigError, match="client_state_dir=3 is invalid"):
        _run(algo, data, client_state_dir=3)


def test_a_state_that_does_not_fit_on_the_disk_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(client_store.shutil, "disk_usage",
                        lambda path: type("U", (), {"free": 1000})())
    with pytest.raises(ConfigError, match=r"has 1000 B free, but the client state of 12 "
                                          r"clients needs"):
        _run(STATEFUL["fedmac"](), _data(), client_state_dir=tmp_path / "c")


def test_a_checkpoint_resumes_whichever_side_of_the_budget_the_state_is_on(tmp_path):
    data = _data()
    straight = _run(STATEFUL["per_fedavg"](), data, rounds=5)
    for first, then in ((None, 0), (0, None)):  # memory -> disk, disk -> memory
        ckpt = tmp_path / f"run-{first}.pt"
        _run(STATEFUL["per_fedavg"](), data, rounds=2, checkpoint=ckpt,
             client_state_memory=first)
        resumed = _run(STATEFUL["per_fedavg"](), data, rounds=5, checkpoint=ckpt,
                       resume=True, client_state_memory=then)
        _same(straight, resumed)


def test_a_state_of_exactly_the_memory_budget_stays_in_memory():
    algo = STATEFUL["pfedme"]().bind(PROBLEM, _data())
    probe = algo.init_clients(PROBLEM, torch.arange(1), 0)
    need = 12 * sum(v[0].numel() * v.element_size() for v in probe.values())  # N rows
    assert not open_client_store(algo, PROBLEM, 12, 0, memory=need).on_disk
    assert open_client_store(algo, PROBLEM, 12, 0, memory=need - 1).on_disk
