"""What a user-written :class:`~fedsparse.algorithms.Algorithm` returns is checked where it
enters the round: a :class:`~fedsparse.ConfigError` naming the method, what it returned
and the form it must have, instead of a traceback from deep inside torch or a silently
wrong run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse import ConfigError
from fedsparse.algorithms.base import Algorithm, payload_rows, weighted_mean

LS = fs.problems.least_squares()


class Averaging(Algorithm):
    """Client i uploads the broadcast plus 0.01 (i + 1); the server averages the uploads.

    ``change`` maps a method's name to a function of what the method would return, whose
    result it returns instead: one broken method per test."""

    name = "averaging"
    client_metrics = ("score",)

    def __init__(self, **change):
        self.change = change
        self.updates = 0

    def _changed(self, method, value):
        return self.change[method](value) if method in self.change else value

    def init(self, problem, seed=0):
        return self._changed("init", super().init(problem, seed))

    def broadcast(self, state, clients):
        return self._changed("broadcast", state["model"])

    def client_update(self, payload, ctx):
        self.updates += 1
        x = payload_rows(payload, ctx.size) + (ctx.clients.to(payload.dtype)[:, None] + 1) * 1e-2
        return self._changed("client_update", (x, None, {"score": 1.0}))

    def aggregate(self, state, uploads, cohort):
        return self._changed("aggregate", {**state, "model": weighted_mean(uploads, cohort)})


@pytest.fixture(scope="module")
def data():
    """6 clients, model size P = 6, float64."""
    return fs.data.shifted_gaussian(num_clients=6, samples_per_client=5, dim=6, sparsity=2,
                                    seed=0, dtype=torch.float64)


def _run(algorithm, data, **kw):
    return fs.simulate(algorithm, LS, data, **{"rounds": 2, **kw})


def test_the_unbroken_algorithm_runs(data):
    h = _run(Averaging(), data, clients_per_round=4)
    assert h.model.shape == (6,) and h.column("score") == [1.0, 1.0]


# ---------------------------------------------------------------- client_update

@pytest.mark.parametrize("wrong, got", [
    (lambda r: r[0], r"a \(3, 6\) torch\.float64 tensor"),  # 3 rows: it unpacked into them
    (lambda r: r[:2], "a tuple of 2"),
    (lambda r: (*r, None), "a tuple of 4"),
    (lambda r: r[2], "a dict"),
])
def test_client_update_must_return_three_things(data, wrong, got):
    with pytest.raises(ConfigError, match=rf"^Averaging\.client_update returned {got}; it "
                       r"must return a 3-tuple \(uploads, client_state, info\): the \(3, P\) "
                       r"uploads"):
        _run(Averaging(client_update=wrong), data, clients_per_round=3)


@pytest.mark.parametrize("state, match", [
    (torch.zeros(6), r"client_state as a \(6,\) torch\.float32 tensor; client_state must be "
                     r"a dict of \(6, \.\.\.\) tensors or None"),
    ({"s": torch.zeros(5, 2)}, r"client_state\['s'\] as a \(5, 2\) torch\.float32 tensor; "
                               r"client_state must be a dict of \(6, \.\.\.\) tensors or None"),
])
def test_client_update_state_rows_must_be_one_per_client(data, state, match):
    with pytest.raises(ConfigError, match=r"^Averaging\.client_update returned " + match):
        _run(Averaging(client_update=lambda r: (r[0], state, r[2])), data)


@pytest.mark.parametrize("info, match", [
    ({"foo": "bar"}, r"info\['foo'\]='bar'; info values must be real numbers"),
    ({"score": [1.0]}, r"info\['score'\]=\[1\.0\]; info values must be real numbers"),
    ({"score": True}, r"info\['score'\]=True; info values must be real numbers"),
    ({"score": torch.ones(2)}, r"info\['score'\]=<a \(2,\) torch\.float32 tensor>; info "
                               r"values must be real numbers"),
    ([("score", 1.0)], r"info as a list; info must be a dict \{name: real number\}"),
])
def test_client_update_info_values_must_be_real_numbers(data, info, match):
    with pytest.raises(ConfigError, match=r"^Averaging\.client_update returned " + match):
        _run(Averaging(client_update=lambda r: (r[0], r[1], info)), data)


def test_numeric_info_is_recorded_or_dropped_with_a_warning_as_documented(data):
    """A number of any kind (a NumPy scalar, a one-element tensor) is recorded under a
    declared name; an undeclared name and a non-finite value are not, with a warning."""
    info = {"score": torch.tensor(2.5, dtype=torch.float64)}
    h = _run(Averaging(client_update=lambda r: (r[0], r[1], info)), data)
    assert h.column("score") == [2.5, 2.5]
    info = {"score": np.float32(0.5), "other": 3, "nan": float("nan")}
    with pytest.warns(RuntimeWarning, match="not in its client_metrics"):
        h = _run(Averaging(client_update=lambda r: (r[0], r[1], info)), data)
    assert h.column("score") == [0.5, 0.5]
    assert all("other" not in r and "nan" not in r for r in h.records)


# ---------------------------------------------------------------- aggregate and init

@pytest.mark.parametrize("wrong, got", [
    (lambda s: s["model"], r"a \(6,\) torch\.float64 tensor"),
    (lambda s: [s["model"]], "a list"),
    (lambda s: {"weights": s["model"]}, r"a dict that Averaging\.model cannot read "
                                        r"\(KeyError: 'model'; its keys: \['weights'\]\)"),
])
def test_aggregate_must_return_a_state_holding_the_model(data, wrong, got):
    with pytest.raises(ConfigError, match=rf"^Averaging\.aggregate returned {got}.*it must "
                       r"return the server state: a dict holding the \(P,\) global model "
                       r"under 'model'"):
        _run(Averaging(aggregate=wrong), data)


@pytest.mark.parametrize("method", ["init", "aggregate"])
@pytest.mark.parametrize("wrong, got", [
    (lambda m: m[:5], r"\(5,\) torch\.float64"),
    (lambda m: m.float(), r"\(6,\) torch\.float32"),
    (lambda m: m.expand(4, -1).clone(), r"\(4, 6\) torch\.float64"),
    (lambda m: m.tolist(), "a list"),
])
def test_the_model_must_have_the_problems_size_and_the_datas_dtype(data, method, wrong, got):
    def broken(state):
        return {**state, "model": wrong(state["model"])}

    with pytest.raises(ConfigError, match=rf"^Averaging\.{method} returned the global model "
                       rf"as {'a ' if 'torch' in got else ''}{got}.*; it must be a \(6,\) "
                       r"torch\.float64 tensor"):
        _run(Averaging(**{method: broken}), data, clients_per_round=4)


# ---------------------------------------------------------------- broadcast

@pytest.mark.parametrize("wrong, got", [
    (lambda m: m.expand(7, -1), r"a \(7, 6\) torch\.float64 tensor"),
    (lambda m: m.expand(2, -1), r"a \(2, 6\) torch\.float64 tensor"),
    (lambda m: m.expand(4, 1, -1), r"a \(4, 1, 6\) torch\.float64 tensor"),
    (lambda m: m.float(), r"a \(6,\) torch\.float32 tensor"),
    (lambda m: m.expand(4, -1).float(), r"a \(4, 6\) torch\.float32 tensor"),
    (lambda m: m.tolist(), "a list"),
])
def test_broadcast_must_be_one_payload_or_one_row_per_client(data, wrong, got):
    with pytest.raises(ConfigError, match=rf"^Averaging\.broadcast returned {got} for 4 "
                       r"sampled clients; it must return one payload for all, a \(P,\) "
                       r"tensor, or one row per client, a \(4, P\) tensor, of dtype "
                       r"torch\.float64 \(P: the payload's width, the model's 6"):
        _run(Averaging(broadcast=wrong), data, clients_per_round=4)


def test_a_broadcast_of_one_row_per_client_runs_as_a_shared_one(data):
    shared = _run(Averaging(), data, clients_per_round=4)
    rows = _run(Averaging(broadcast=lambda m: m.expand(4, -1)), data, clients_per_round=4)
    assert torch.equal(rows.model, shared.model)


# ---------------------------------------------------------------- checkpointed state

@pytest.mark.parametrize("entry, named", [
    ({"schedule": {"fn": lambda t: t}}, r"state\['schedule'\]\['fn'\] is a function"),
    # saved by torch.save, but refused by the weights_only read of a resume
    ({"lr": np.float64(0.1)}, r"state\['lr'\] is a float64"),
    ({"pairs": {(1, 2): 0.5}}, r"state\['pairs'\] has a key that is a tuple"),
])
def test_a_state_that_cannot_be_checkpointed_is_refused_before_the_first_round(
        data, tmp_path, entry, named):
    algo = Averaging(init=lambda s: {**s, **entry})
    path = tmp_path / "run.ckpt"
    with pytest.raises(ConfigError, match=rf"^Averaging\.init returned a server state whose "
                       rf"{named}; a checkpointed state holds only tensors, numbers, strings, "
                       r"None and lists or dicts of them, with number or string keys "
                       r"\(checkpoint="):
        _run(algo, data, checkpoint=path)
    assert not path.exists()
    # without a checkpoint the state is never saved, and may hold anything
    _run(Averaging(init=lambda s: {**s, **entry}), data)


def test_a_state_that_cannot_be_checkpointed_later_is_named_at_the_save(data, tmp_path):
    algo = Averaging(aggregate=lambda s: {**s, "rng": torch.Generator()})
    with pytest.raises(ConfigError, match=r"^Averaging\.aggregate returned a server state "
                       r"whose state\['rng'\] is a Generator; a checkpointed state"):
        _run(algo, data, checkpoint=tmp_path / "run.ckpt", checkpoint_every=1)


def test_a_callback_that_leaves_a_nan_in_the_model_is_named(data):
    def poisons(record, state):
        if record["round"] == 2:
            state["model"][0] = float("nan")

    with pytest.raises(ConfigError, match=r"round 2: callback .*poisons left a non-finite "
                                          r"model \(NaN or inf\) in the state"):
        fs.simulate(fs.algorithms.fed_avg(step_size=0.01), LS, data, rounds=4,
                    callback=poisons, progress=False)
    # one that changes the model to finite values is allowed
    history = fs.simulate(fs.algorithms.fed_avg(step_size=0.01), LS, data, rounds=2,
                          callback=lambda record, state: state["model"].mul_(0.5),
                          progress=False)
    assert len(history.records) == 2


@pytest.mark.parametrize("change, said", [
    (lambda state: state.update(model=state["model"][:3]), r"as a \(3,\) torch.float64 "
     r"tensor; it must stay a \(\d+,\) torch.float64 tensor"),
    (lambda state: state.update(model=state["model"].float()), "as a .* torch.float32 "
     "tensor; it must stay"),
    (lambda state: state.pop("model"), r"cannot read \(KeyError: 'model'\)"),
])
def test_a_callback_that_reshapes_or_removes_the_model_is_named(data, change, said):
    # named where it happened, not as the next round's broadcast or a numpy matmul
    def changes(record, state):
        if record["round"] == 2:
            change(state)

    with pytest.raises(ConfigError, match=r"round 2: callback .*changes left .*" + said):
        fs.simulate(fs.algorithms.fed_avg(step_size=0.01), LS, data, rounds=4,
                    callback=changes, progress=False)


def test_an_object_a_callback_puts_in_a_checkpointed_state_is_named_with_it(data, tmp_path):
    # the checkpoint's check named the algorithm's aggregate, which never returned it
    def keeps(record, state):
        if record["round"] == 2:
            state["extra"] = lambda: None

    with pytest.raises(ConfigError, match=r"round 2: callback .*keeps left a server state "
                       r"whose state\['extra'\] is a function"):
        fs.simulate(fs.algorithms.fed_avg(step_size=0.01), LS, data, rounds=4,
                    callback=keeps, checkpoint=tmp_path / "c.pt", checkpoint_every=3,
                    progress=False)
