"""The round loop's screening and record (fedsparse.rounds), through the simulator:
lost uploads never change a run, client diagnostics never overwrite what the server
measured, and the relative bound on update distances."""

import math
import re
import warnings

import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms import Algorithm, ClientContext
from fedsparse.algorithms.base import payload_rows, weighted_mean
from fedsparse.channels import ScheduledChannel
from fedsparse.rounds import screen_client_metrics, upload_problems

VOLATILE = {"seconds", "elapsed"}


class Scripted(Algorithm):
    """Client i uploads ``broadcast + (i + 1) * 1e-2``; ``poison[(round, client)]`` (a
    float) multiplies that upload (NaN, inf, 1e30) and ``info`` is every client's
    diagnostics dict, so a test decides exactly what comes back."""

    name = "scripted"
    upload_encoding = "dense"
    broadcast_encoding = "dense"

    def __init__(self, poison=None, info=None, declared=()):
        self.poison = dict(poison or {})
        self.info = dict(info or {})
        self.client_metrics = tuple(declared)

    def client_update(self, payload, ctx: ClientContext):
        x = payload_rows(payload, ctx.size).clone()
        x += (ctx.clients.to(x.dtype)[:, None] + 1) * 1e-2
        for row, client in enumerate(ctx.clients.tolist()):
            if (ctx.round, client) in self.poison:
                x[row] *= self.poison[(ctx.round, client)]
        return x, None, dict(self.info)

    def aggregate(self, state, uploads, cohort):
        return {**state, "model": weighted_mean(uploads, cohort)}


@pytest.fixture(scope="module")
def data():
    return fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=8, sparsity=3,
                                    seed=1, dtype=torch.float64)


def _run(algorithm, data, **kw):
    return fs.simulate(algorithm, fs.problems.least_squares(), data, rounds=3, **kw)


def _strip(records):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in records]


#: Client 0's upload is lost in round 1 (0-based), the others arrive every round.
LOSE_CLIENT_0_IN_ROUND_1 = ScheduledChannel([[1, 1, 1], [0, 1, 1], [1, 1, 1]])


@pytest.mark.parametrize("factor", [float("nan"), float("inf"), -float("inf")])
def test_a_lost_nonfinite_upload_does_not_change_the_run(data, factor):
    """The server never sees a lost upload: NaN or inf in it is no divergence, and the
    run (model and every record) is the run in which that upload was finite."""
    poisoned = _run(Scripted(poison={(1, 0): factor}), data,
                    channel=LOSE_CLIENT_0_IN_ROUND_1)
    clean = _run(Scripted(), data, channel=LOSE_CLIENT_0_IN_ROUND_1)
    assert torch.equal(poisoned.model, clean.model)
    assert _strip(poisoned.records) == _strip(clean.records)
    assert poisoned.column("delivered_clients")[1] == [1, 2]


def test_a_delivered_nonfinite_upload_is_divergence(data):
    with pytest.raises(fs.DivergenceError, match=r"round 2: .* local training of clients \[2\]"):
        _run(Scripted(poison={(1, 2): float("nan")}), data, channel=LOSE_CLIENT_0_IN_ROUND_1)


def test_client_diagnostics_never_overwrite_the_servers_record(data):
    """Diagnostics named like server fields, undeclared or non-finite are not recorded;
    the declared, finite one is, under its own name."""
    info = {"round": 7, "delivered": 99, "rejected": 0, "bytes_up": 0, "objective": -1.0,
            "undeclared": 1.0, "score": 2.5}
    with pytest.warns(RuntimeWarning) as caught:
        h = _run(Scripted(info=info, declared=("score",)), data, max_update_norm=1e-12)
    assert any("not in its client_metrics" in str(w.message) for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no upload delivered: expected
        honest = _run(Scripted(declared=("score",)), data, max_update_norm=1e-12)
    assert h.column("round") == [1, 2, 3]
    assert h.column("delivered") == [0, 0, 0] and h.column("rejected") == [3, 3, 3]
    assert h.column("bytes_up") == honest.column("bytes_up") != [0, 0, 0]
    assert h.column("objective") == honest.column("objective")
    assert h.column("score") == [2.5, 2.5, 2.5]
    assert all("undeclared" not in r for r in h.records)


def test_a_nonfinite_diagnostic_is_not_recorded(data):
    with pytest.warns(RuntimeWarning, match="score"):
        h = _run(Scripted(info={"score": float("nan")}, declared=("score",)), data)
    assert all("score" not in r for r in h.records)


@pytest.mark.parametrize("name", ["rejected", "round", "objective", "nnz", "delivered_clients",
                                  "personal_accuracy"])
def test_an_algorithm_may_not_declare_a_server_field(data, name):
    with pytest.raises(ConfigError, match=f"client_metrics.*{name}"):
        _run(Scripted(declared=(name,)), data)


def test_screen_client_metrics_names_what_it_refuses():
    declared = ("a", "b", "c")
    ok, refused = screen_client_metrics(
        {"a": 1, "b": float("inf"), "c": "abc", "d": 2.0, "x" * 500: 1.0, 3: 1.0}, declared)
    assert ok == {"a": 1.0}
    assert len(refused) == 5
    assert any("'b'" in r and "finite" in r for r in refused)
    assert all(len(r) < 200 for r in refused)  # a 500-character name is not echoed whole
    ok, refused = screen_client_metrics({f"m{i}": 1.0 for i in range(10_000)}, declared)
    assert ok == {} and len(refused) == 1 and "10000" in refused[0]
    ok, refused = screen_client_metrics({"a": True, "b": [1.0], "c": 2**70}, declared)
    assert ok == {"c": float(2**70)} and len(refused) == 2


def test_the_relative_bound_rejects_only_the_outlier():
    payload = torch.zeros(4)
    uploads = torch.tensor([[1.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 3.0, 0], [1e30, 0, 0, 0]])
    received = torch.ones(4, dtype=torch.bool)
    found = upload_problems(uploads, received, payload, None, max_update_ratio=100.0)
    assert list(found) == [3] and "100" in found[3] and "median" in found[3]
    # distances 1, 2, 3: the lower median is 2, so a ratio of 1.4 refuses only the 3
    assert list(upload_problems(uploads[:3], received[:3], payload, None, 1.4)) == [2]
    assert upload_problems(uploads[:3], received[:3], payload, None, 1.5) == {}
    # no bound when the median distance is zero (most clients sent the broadcast back)
    zeros = torch.zeros(3, 4)
    zeros[2, 0] = 5.0
    assert upload_problems(zeros, received[:3], payload, None, 100.0) == {}
    # a lone upload is its own median
    assert upload_problems(uploads[3:], received[3:], payload, None, 100.0) == {}


def test_the_relative_bound_in_the_simulator(data):
    """A 1e30-scaled upload moves the model by 1e28 without a bound, not at all with it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        free = _run(Scripted(poison={(1, 2): 1e30}), data)
    bounded = _run(Scripted(poison={(1, 2): 1e30}), data, max_update_ratio=100.0)
    honest = _run(Scripted(), data, max_update_ratio=100.0)
    assert float(free.model.abs().max()) > 1e27
    assert bounded.column("rejected") == [0, 1, 0]
    assert bounded.column("delivered_clients")[1] == [0, 1]
    assert honest.column("rejected") == [0, 0, 0]
    assert math.isfinite(float(bounded.model.abs().max()))
    assert float(bounded.model.abs().max()) < 1


@pytest.mark.parametrize("bad, why", [(0.5, "must be at least 1"), (0, "must be at least 1"),
                                      (-3.0, "must be at least 1"),
                                      (float("inf"), "must be a finite number"),
                                      ("100", "must be a finite number")])
def test_max_update_ratio_is_checked(data, bad, why):
    with pytest.raises(ConfigError, match=f"max_update_ratio=.* is invalid: {why}"):
        _run(Scripted(), data, max_update_ratio=bad)


# ------------------------------------------- the evaluation schedule and the initial record


def _schedule_loop(algorithm, data, eval_every, every_round=None):
    """A RoundLoop whose ``evaluate`` notes the rounds it is told."""
    from fedsparse.client_store import ClientStore
    from fedsparse.rounds import Replies, RoundLoop

    bound = algorithm.bind(fs.problems.least_squares(), data)
    told = []

    def execute(t, clients, payload, config, rows):
        S = int(clients.shape[0])
        return Replies(uploads=payload.expand(S, -1).clone(),
                       received=torch.ones(S, dtype=torch.bool), bytes_up=0)

    def evaluate(model, state, store, round):
        told.append(round)
        return {"objective": float(round)}

    loop = RoundLoop(bound, data.weights, 0, None, fs.channels.PerfectChannel(), execute,
                     evaluate, ClientStore(None), eval_every=eval_every,
                     every_round=every_round)
    return loop, bound, told


@pytest.mark.parametrize("eval_every, rounds_told", [
    (1, [0, 1, 2, 3, 4, 5, 6, 7]), (3, [0, 3, 6, 7]), (0, [0, 7]), (-1, [])])
def test_the_loop_decides_when_to_evaluate_and_tells_the_round(data, eval_every, rounds_told):
    loop, bound, told = _schedule_loop(Scripted(), data, eval_every)
    history = fs.History()
    state = bound.init(fs.problems.least_squares())
    history.initial = loop.initial_record(state, 7)
    loop.run(state, history, 0, 7, progress=False)
    assert told == rounds_told
    evaluated = [r["round"] for r in [history.initial, *history.records] if "objective" in r]
    assert evaluated == rounds_told
    assert all(r["objective"] == r["round"] for r in history.records if "objective" in r)


def test_the_initial_record_has_zero_traffic_and_the_every_round_fields(data):
    loop, bound, told = _schedule_loop(Scripted(), data, -1,
                                       every_round=lambda model: {"nnz": 5})
    initial = loop.initial_record(bound.init(fs.problems.least_squares()), 4)
    assert told == [] and initial["round"] == 0 and initial["nnz"] == 5
    assert all(initial[k] == 0 for k in ("bytes_up", "bytes_down", "bytes_total",
                                         "clients_sampled", "delivered"))


def test_eval_every_below_minus_one_is_refused(data):
    with pytest.raises(ConfigError, match="eval_every"):
        _schedule_loop(Scripted(), data, -2)


# ------------------------------------------- sampling, resuming, divergence and checkpoints


def test_the_sampled_clients_are_those_with_the_smallest_keys_in_ascending_order():
    from fedsparse import rng
    from fedsparse.rounds import sample_clients

    keys = rng.uniform(5, rng.CLIENT_SAMPLE, 3, torch.arange(10))
    # the 4 ids whose uniform keys are smallest, listed by id
    want = sorted(torch.argsort(keys)[:4].tolist())
    assert sample_clients(5, 3, 10, 4).tolist() == want


def test_a_resumed_loop_tells_the_whole_run_length_and_keeps_the_clock(data):
    loop, bound, _ = _schedule_loop(Scripted(), data, -1)
    told, execute = [], loop.execute

    def noting(t, clients, payload, config, rows):
        told.append((t, config["total_rounds"]))
        return execute(t, clients, payload, config, rows)

    loop.execute = noting
    history = fs.History(records=[{"round": 2, "bytes_up_total": 0, "bytes_down_total": 0,
                                   "elapsed": 100.0}])
    loop.run(bound.init(fs.problems.least_squares()), history, 2, 4, progress=False)
    assert told == [(2, 4), (3, 4)]  # T = 4 in every round, not the 2 rounds left
    assert [r["round"] for r in history.records] == [2, 3, 4]
    assert all(r["elapsed"] >= 100.0 for r in history.records[1:])  # 100 s + this run's


def test_the_loop_saves_every_checkpoint_every_rounds_and_at_the_last(data):
    loop, bound, _ = _schedule_loop(Scripted(), data, -1)
    saved = []
    loop.run(bound.init(fs.problems.least_squares()), fs.History(), 0, 5,
             save=lambda done, state: saved.append(done), checkpoint_every=2, progress=False)
    assert saved == [2, 4, 5]  # rounds 2 and 4, then the last, 5


class _BlowsUpInRound2(Scripted):
    """Scripted whose aggregate returns a NaN model in round 2 (0-based 1)."""

    def aggregate(self, state, uploads, cohort):
        new = super().aggregate(state, uploads, cohort)
        if cohort.round == 1:
            new["model"] = torch.full_like(new["model"], float("nan"))
        return new


def test_divergence_keeps_the_last_finite_model(data):
    with pytest.raises(fs.DivergenceError) as caught:
        _run(_BlowsUpInRound2(), data)
    # round 1 from the zero model: uploads 0.01, 0.02, 0.03 in every entry, weights 1/3
    # each (10 examples per client), so the round-1 model is 0.02 everywhere
    assert caught.value.round == 2
    assert torch.allclose(caught.value.history.model, torch.full((8,), 0.02, dtype=torch.float64))


def test_flower_diagnostics_are_the_mean_over_the_accepted_uploads_that_sent_them(data):
    from fedsparse.rounds import Replies

    loop, bound, _ = _schedule_loop(Scripted(declared=("score",)), data, -1)

    def execute(t, clients, payload, config, rows):
        uploads = payload.expand(3, -1).clone()
        uploads[2] += 1e6  # farther than max_update_norm: rejected
        return Replies(uploads=uploads, received=torch.ones(3, dtype=torch.bool), bytes_up=0,
                       info_rows={0: {"score": 1.0}, 1: {"score": 3.0}, 2: {"score": 100.0}})

    loop.execute, loop.max_update_norm = execute, 1.0
    history = fs.History()
    loop.run(bound.init(fs.problems.least_squares()), history, 0, 1, progress=False)
    # clients 0 and 1 accepted: (1 + 3) / 2; the rejected client's 100 is not counted
    assert history.records[0]["rejected"] == 1
    assert history.records[0]["score"] == 2.0


def test_a_ratio_bound_of_exactly_one_is_accepted(data):
    assert _run(Scripted(), data, max_update_ratio=1.0).column("round") == [1, 2, 3]


def test_every_client_per_round_and_the_algorithms_own_cohort_size(data):
    assert _run(Scripted(), data, clients_per_round=3).column("clients_sampled") == [3, 3, 3]
    two = Scripted()
    two.clients_per_round = 2  # what the algorithm asks for when simulate is not told
    assert _run(two, data).column("clients_sampled") == [2, 2, 2]


def test_weighted_mean_renormalises_over_the_delivered_rows():
    from fedsparse.algorithms import Cohort

    uploads = torch.tensor([[1.0, 0.0], [100.0, 100.0], [0.0, 1.0]], dtype=torch.float64)
    cohort = Cohort(0, torch.arange(3), torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64),
                    torch.tensor([True, False, True]))
    # (0.5 * [1, 0] + 0.2 * [0, 1]) / (0.5 + 0.2)
    assert torch.allclose(weighted_mean(uploads, cohort),
                          torch.tensor([5 / 7, 2 / 7], dtype=torch.float64))


def test_payload_rows_are_a_copy_each_client_may_change():
    payload = torch.zeros(3)
    rows = payload_rows(payload, 2)
    rows[0, 0] = 5.0
    assert payload.tolist() == [0.0, 0.0, 0.0] and rows[1].tolist() == [0.0, 0.0, 0.0]


def test_auto_step_size_is_one_over_the_largest_reported_lipschitz_constant():
    from fedsparse.algorithms.base import resolve_step_size

    # L_i = 1 and 4, and a client that reported nothing (NaN): 1 / max(1, 4)
    stats = {"lipschitz": torch.tensor([1.0, 4.0, math.nan], dtype=torch.float64)}
    assert resolve_step_size("auto", stats) == 0.25


# ------------------------------------------- a loss that overflows on a finite model


class _HugeModel(Scripted):
    """Scripted whose aggregate returns the finite model 1e200 in the rounds ``huge``
    (0-based): its float64 least-squares loss overflows to inf. Each client counts its
    visits in its state, so a checkpoint shows whose client state it holds."""

    stateful_clients = True

    def __init__(self, huge):
        super().__init__()
        self.huge = set(huge)

    def init_clients(self, problem, clients, seed=0):
        return {"visits": torch.zeros(clients.shape[0], dtype=torch.float64)}

    def client_update(self, payload, ctx: ClientContext):
        x, _, info = super().client_update(payload, ctx)
        return x, {"visits": ctx.state["visits"] + 1}, info

    def aggregate(self, state, uploads, cohort):
        new = super().aggregate(state, uploads, cohort)
        if cohort.round in self.huge:
            new["model"] = torch.full_like(new["model"], 1e200)
        elif cohort.round - 1 in self.huge:  # back to the small model of the round before
            new["model"] = torch.full_like(new["model"], 0.02 * (cohort.round + 1))
        return new


@pytest.mark.parametrize("on_disk", [False, True])
def test_an_evaluated_loss_that_overflows_stops_the_run_with_the_round_before(data, tmp_path,
                                                                            on_disk):
    """The model of round 2 is finite but its objective is inf: the run stops at round 2,
    keeps round 1's model, records and client state (also in the checkpoint; the state
    in memory or in files), and never records the inf."""
    where = {"client_state_dir": tmp_path / "state"} if on_disk else {}
    with pytest.raises(fs.DivergenceError, match=r"round 2: the model's evaluated loss is "
                       r"not finite \(objective=inf\), though the model is") as caught:
        _run(_HugeModel(huge={1}), data, checkpoint=tmp_path / "c", **where)
    err = caught.value
    assert err.round == 2
    assert [r["round"] for r in err.history.records] == [1]
    assert all(math.isfinite(r["objective"]) for r in err.history.records)
    assert torch.allclose(err.history.model, torch.full((8,), 0.02, dtype=torch.float64))
    saved = torch.load(tmp_path / "c", weights_only=True)
    assert saved["round"] == 1
    assert torch.allclose(saved["state"]["model"], err.history.model)
    # round 2's visits were put back: every client as after round 1
    assert saved["client_state"]["visits"].tolist() == [1.0, 1.0, 1.0]


def test_a_round_without_an_evaluation_is_not_stopped_by_its_loss(data):
    """eval_every=2: the huge model of round 3 is not evaluated (round 4, the last, is,
    with a small model again), so the run goes on."""
    history = fs.simulate(_HugeModel(huge={2}), fs.problems.least_squares(), data, rounds=4,
                          eval_every=2)
    assert history.column("round") == [1, 2, 3, 4]
    assert "objective" not in history.records[2]
    assert all(math.isfinite(history.records[i]["objective"]) for i in (1, 3))


@pytest.mark.parametrize("name, value, stops", [
    ("objective", float("inf"), True), ("objective", float("nan"), True),
    ("test_objective", float("inf"), True), ("personal_objective", float("nan"), True),
    ("personal_test_objective", -float("inf"), True),
    # a distance to the ground truth, not a loss (inf for a large model if the truth is 0)
    ("rel_error", float("inf"), False), ("objective", None, False)])
def test_which_evaluated_metrics_are_losses(data, name, value, stops):
    loop, bound, _ = _schedule_loop(Scripted(), data, 1)
    measure = loop.evaluate

    def evaluate(model, state, store, round):
        out = measure(model, state, store, round)
        return {**out, name: value} if round == 2 else out

    loop.evaluate = evaluate

    def rounds_recorded():
        history = fs.History()
        try:
            loop.run(bound.init(fs.problems.least_squares()), history, 0, 3, progress=False)
        except fs.DivergenceError as exc:
            assert re.search(f"round 2: .*{name}=", str(exc))
            assert exc.history is history and exc.round == 2
        return [r["round"] for r in history.records]

    assert rounds_recorded() == ([1] if stops else [1, 2, 3])
    # without the stop (the Flower server: its losses are the nodes' screened reports)
    loop.stop_on_nonfinite_loss = False
    assert rounds_recorded() == [1, 2, 3]
