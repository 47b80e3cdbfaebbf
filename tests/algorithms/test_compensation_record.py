"""The sparse similarity record of SAFARI's compensation (Mao et al. 2022, eq. 35, Alg. 3):
hand-worked updates and substitutions, a randomised merge against a dictionary, and whole
lossy runs against the dense (N, N) record written out here as the reference."""

import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms.base import Cohort
from fedsparse.algorithms.compensation import (
    SimilarityCompensation,
    _merge,
    check_record,
    dense_record,
    empty_record,
    lookup,
    substitute,
    update_similarity,
)
from fedsparse.checkpoints import read_checkpoint, save_checkpoint

INF = float("inf")


def _cohort(clients, delivered):
    clients = torch.tensor(clients)
    return Cohort(0, clients, torch.full(clients.shape, 1 / len(clients), dtype=torch.float64),
                  torch.tensor(delivered, dtype=torch.bool))


def _rows(rows):
    return torch.tensor(rows, dtype=torch.float64)


def _record(pairs, distances):
    return {"pairs": torch.tensor(pairs, dtype=torch.int64),
            "distances": torch.tensor(distances, dtype=torch.float64)}


# ------------------------------------------------------------- update, by hand (N = 10)


def _two_rounds():
    # round 1: clients 1, 4, 6 at (0, 0), (3, 0), (0, 4): d14 = 3, d16 = 4, d46 = 5
    first = update_similarity(empty_record(), _rows([[0, 0], [3, 0], [0, 4]]),
                              _cohort([1, 4, 6], [1, 1, 1]), 10)
    # round 2: 0, 4, 6 arrive at (0, 0), (6, 8), (6, 0), 9 is lost (its row is unused):
    # d04 = 10, d06 = 6, and d46 is measured again: 8 replaces 5
    second = update_similarity(first, _rows([[0, 0], [6, 8], [6, 0], [99, 99]]),
                               _cohort([0, 4, 6, 9], [1, 1, 1, 0]), 10)
    return first, second


def test_a_round_records_each_received_pair_once_keyed_u_n_plus_v():
    first, _ = _two_rounds()
    assert first["pairs"].tolist() == [1 * 10 + 4, 1 * 10 + 6, 4 * 10 + 6]
    assert first["distances"].tolist() == [3.0, 4.0, 5.0]


def test_a_pair_measured_again_keeps_the_latest_distance_and_new_pairs_are_inserted():
    first, second = _two_rounds()
    assert second["pairs"].tolist() == [4, 6, 14, 16, 46]
    assert second["distances"].tolist() == [10.0, 6.0, 3.0, 4.0, 8.0]
    assert first["distances"].tolist() == [3.0, 4.0, 5.0]  # the old record is untouched
    dense = dense_record(second, 10)
    assert dense[6, 4] == dense[4, 6] == 8.0 and dense[1, 0] == INF and dense[4, 4] == INF
    assert int(torch.isfinite(dense).sum()) == 2 * 5


def test_a_round_of_pairs_all_measured_before_only_overwrites():
    _, second = _two_rounds()
    # 4 and 6 again, now 2 apart: no pair is new, d46 = 8 becomes 2
    third = update_similarity(second, _rows([[0, 0], [0, 2]]), _cohort([4, 6], [1, 1]), 10)
    assert third["pairs"].tolist() == [4, 6, 14, 16, 46]
    assert third["distances"].tolist() == [10.0, 6.0, 3.0, 4.0, 2.0]
    assert second["distances"].tolist() == [10.0, 6.0, 3.0, 4.0, 8.0]


def test_fewer_than_two_arrivals_measure_nothing():
    _, second = _two_rounds()
    same = update_similarity(second, _rows([[1, 1], [2, 2]]), _cohort([3, 4], [0, 1]), 10)
    assert same["pairs"].tolist() == second["pairs"].tolist()


def test_the_merge_matches_a_dictionary_over_random_rounds():
    gen = torch.Generator().manual_seed(0)
    N, record, truth = 40, empty_record(), {}
    for _ in range(30):
        clients = torch.randperm(N, generator=gen)[:int(torch.randint(0, 9, (1,), generator=gen))]
        clients = clients.sort().values
        u, v = torch.triu_indices(len(clients), len(clients), offset=1)
        keys = clients[u] * N + clients[v]
        dist = torch.rand(keys.shape, generator=gen, dtype=torch.float64)
        record = _merge(record["pairs"], record["distances"], keys, dist)
        truth.update(zip(keys.tolist(), dist.tolist(), strict=True))
        check_record(record, N)
        assert record["pairs"].tolist() == sorted(truth)
        assert record["distances"].tolist() == [truth[k] for k in sorted(truth)]
    assert len(truth) > 100  # many rounds re-measured pairs and inserted new ones


# ------------------------------------------------------------ substitute, by hand


def test_the_lost_client_takes_the_closest_received_one_in_either_key_order():
    _, record = _two_rounds()  # d04 = 10, d06 = 6, d14 = 3, d16 = 4, d46 = 8
    uploads = _rows([[0, 0], [0, 0], [4, 4], [6, 6]])
    # clients 0, 1, 4, 6; 1 is lost: d14 = 3 < d16 = 4 (d01 never measured): 4 stands in,
    # not the farthest (6) nor the unknown (0)
    out, delivered, dropped = substitute(record, uploads, _cohort([0, 1, 4, 6], [1, 0, 1, 1]),
                                         10)
    assert out[1].tolist() == [4.0, 4.0] and delivered.all() and dropped == 0
    # 6 is lost (the larger id of its pairs): d06 = 6, d16 = 4, d46 = 8: client 1 stands in
    uploads = _rows([[0, 0], [1, 1], [4, 4], [0, 0]])
    out, delivered, _ = substitute(record, uploads, _cohort([0, 1, 4, 6], [1, 1, 1, 0]), 10)
    assert out[3].tolist() == [1.0, 1.0] and delivered.all()
    # 4 is lost with 0 and 6 received: d04 = 10 > d46 = 8, so 6 (not the lower id 0)
    out, _, _ = substitute(record, _rows([[0, 0], [0, 0], [6, 6]]),
                           _cohort([0, 4, 6], [1, 0, 1]), 10)
    assert out[1].tolist() == [6.0, 6.0]


def test_ties_go_to_the_lowest_client_id():
    # d02 = d25 = 1 and d27 = 1: client 2 is replaced by 0, whichever side of 2 the ids lie
    record = _record([0 * 10 + 2, 2 * 10 + 5, 2 * 10 + 7], [1.0, 1.0, 1.0])
    out, _, _ = substitute(record, _rows([[0], [0], [5], [7]]),
                           _cohort([0, 2, 5, 7], [1, 0, 1, 1]), 10)
    assert out[1].tolist() == [0.0]
    out, _, _ = substitute(record, _rows([[0], [5], [7]]), _cohort([2, 5, 7], [0, 1, 1]), 10)
    assert out[0].tolist() == [5.0]


def test_a_client_never_compared_with_the_received_ones_is_dropped():
    _, record = _two_rounds()
    # 9 was never received with anyone; 1 was, but not with 0 (the only arrival)
    uploads = _rows([[3, 3], [0, 0], [0, 0]])
    out, delivered, dropped = substitute(record, uploads, _cohort([0, 1, 9], [1, 0, 0]), 10)
    assert dropped == 2 and delivered.tolist() == [True, False, False]
    assert torch.equal(out, uploads)
    # nothing arrived: every lost client is dropped
    _, delivered, dropped = substitute(record, uploads, _cohort([0, 1, 9], [0, 0, 0]), 10)
    assert dropped == 3 and not delivered.any()


def test_lookup_is_infinite_off_the_record_and_on_the_diagonal():
    _, record = _two_rounds()
    u, v = torch.tensor([[4], [6], [1]]), torch.tensor([[4, 0, 1, 6]])
    assert lookup(record, u, v, 10).tolist() == [[INF, 10, 3, 8], [8, 6, 4, INF],
                                                  [3, INF, INF, 4]]
    assert lookup(empty_record(), u, v, 10).isinf().all()


@pytest.mark.parametrize("record,message", [
    (_record([16, 14], [1.0, 2.0]), "not strictly increasing"),
    (_record([14, 14], [1.0, 2.0]), "not strictly increasing"),
    (_record([41], [1.0]), "u * N + v with 0 <= u < v < N = 10"),  # u = 4 > v = 1
    (_record([44], [1.0]), "u * N + v"),  # u = v
    (_record([-3], [1.0]), "u * N + v"),
    (_record([14], [-1.0]), "negative or not finite"),
    (_record([14], [INF]), "negative or not finite"),
    (_record([14], [float("nan")]), "negative or not finite"),
    (_record([14, 16], [1.0]), "2 pairs but 1 distances"),
    ({"pairs": torch.zeros(1, 1, dtype=torch.int64), "distances": torch.ones(1, 1,
     dtype=torch.float64)}, "'pairs' must be a 1-D torch.int64 tensor"),
    ({"pairs": torch.tensor([14]), "distances": torch.tensor([1.0])},
     "'distances' must be a 1-D torch.float64 tensor"),
    (torch.full((10, 10), INF, dtype=torch.float64), "a dict of 'pairs' and 'distances'"),
])
def test_a_damaged_record_is_refused(record, message):
    with pytest.raises(ConfigError, match="similarity record is damaged") as exc:
        check_record(record, 10)
    assert message in str(exc.value)


def test_state_bytes_hold_no_n_squared_record(monkeypatch):
    # the dense record took 8 N^2 bytes (8 TB at N = 10^6); the sparse one starts empty,
    # so the wrapper adds nothing to its inner algorithm's state
    inner = fs.algorithms.fed_avg(step_size=0.01)
    algo = fs.algorithms.similarity_compensation(inner)
    assert algo.state_bytes(10**6, 1000, 8) == {}
    monkeypatch.setattr(inner, "state_bytes", lambda n, p, s: {"the tables": n * p * s})
    assert algo.state_bytes(10**6, 1000, 8) == {"the tables": 8 * 10**9}


# ------------------------------------------- whole runs against the dense reference


class DenseReference(SimilarityCompensation):
    """Alg. 3 with the (N, N) float64 record (+inf = never measured), as it was kept."""

    def init(self, problem, seed=0):
        N = self.spec.num_clients
        return {**super().init(problem, seed),
                "similarity": torch.full((N, N), INF, dtype=torch.float64)}

    def aggregate(self, state, uploads, cohort):
        rho = state["similarity"].clone()
        got = torch.nonzero(cohort.delivered).flatten()
        lost = torch.nonzero(~cohort.delivered).flatten()
        x = uploads[got].double()
        d = torch.cdist(x[None], x[None], compute_mode="donot_use_mm_for_euclid_dist")[0]
        rho[cohort.clients[got][:, None], cohort.clients[got][None, :]] = d.fill_diagonal_(INF)
        best, pick = rho[cohort.clients[lost][:, None], cohort.clients[got][None, :]].min(1) \
            if len(got) else (torch.full((len(lost),), INF), None)
        ok = torch.isfinite(best)
        out, delivered = uploads.clone(), cohort.delivered.clone()
        out[lost[ok]] = uploads[got[pick[ok]]] if ok.any() else out[lost[ok]]
        delivered[lost[ok]] = True
        inner = self.inner.aggregate(state["inner"], out,
                                     Cohort(cohort.round, cohort.clients, cohort.weights,
                                            delivered))
        return {"inner": inner, "similarity": rho, "compensated": int(ok.sum()),
                "dropped": int((~ok).sum())}


N_CLIENTS = 30


def _data():
    return fs.data.shifted_gaussian(num_clients=N_CLIENTS, samples_per_client=8, dim=12,
                                    sparsity=3, seed=0, dtype=torch.float64)


INNER = {
    "fed_avg": lambda: fs.algorithms.fed_avg(step_size=0.05, local_steps=2),
    "fed_iter_ht": lambda: fs.algorithms.fed_iter_ht(sparsity=3, step_size=0.05,
                                                     local_steps=2),
}


def _run(wrapper, inner, rounds, **kw):
    records = []
    h = fs.simulate(wrapper(INNER[inner]()), fs.problems.least_squares(), _data(),
                    rounds=rounds, seed=3, clients_per_round=12,
                    channel=fs.channels.BernoulliChannel(0.7),
                    callback=lambda r, s: records.append(s["similarity"]), **kw)
    return h, records


def _no_time(h):
    return [{k: v for k, v in r.items() if k not in ("seconds", "elapsed")}
            for r in h.records]


@pytest.mark.parametrize("inner", INNER)
def test_a_lossy_run_equals_the_dense_record_round_by_round(inner):
    sparse, got = _run(SimilarityCompensation, inner, 8)
    dense, want = _run(DenseReference, inner, 8)
    assert _no_time(sparse) == _no_time(dense)
    assert torch.equal(sparse.model, dense.model)
    for record, rho in zip(got, want, strict=True):
        assert torch.equal(dense_record(record, N_CLIENTS), rho)
    # the run exercises both outcomes: substitutes and never-compared clients
    assert sum(sparse.column("compensated")) > 10 and sum(sparse.column("dropped")) > 0
    assert 0 < got[-1]["pairs"].numel() < N_CLIENTS * (N_CLIENTS - 1) // 2


@pytest.mark.parametrize("inner", INNER)
def test_a_run_resumed_from_round_6_equals_a_straight_run(inner, tmp_path):
    straight, records = _run(SimilarityCompensation, inner, 10)
    path = tmp_path / "c.pt"
    _run(SimilarityCompensation, inner, 6, checkpoint=path)
    saved = read_checkpoint(path)["state"]["similarity"]
    assert 0 < saved["pairs"].numel() < records[-1]["pairs"].numel()
    resumed, again = _run(SimilarityCompensation, inner, 10, checkpoint=path, resume=True)
    assert _no_time(resumed) == _no_time(straight)
    assert torch.equal(resumed.model, straight.model)
    assert torch.equal(again[-1]["pairs"], records[-1]["pairs"])
    assert torch.equal(again[-1]["distances"], records[-1]["distances"])


def test_the_record_is_checked_once_a_run_then_trusted_as_built(monkeypatch):
    import fedsparse.algorithms.compensation as C

    checked = []
    check = C.check_record
    monkeypatch.setattr(C, "check_record", lambda r, n: checked.append(n) or check(r, n))
    _run(SimilarityCompensation, "fed_avg", 4)
    _run(SimilarityCompensation, "fed_avg", 3)
    assert checked == [N_CLIENTS, N_CLIENTS]  # the first round of each run


def _saved_with(tmp_path, edit):
    path = tmp_path / "c.pt"
    _run(SimilarityCompensation, "fed_avg", 3, checkpoint=path)
    payload = read_checkpoint(path)
    edit(payload["state"]["similarity"])
    save_checkpoint(path, payload)
    return path


@pytest.mark.parametrize("edit,message", [
    (lambda r: r.update(pairs=r["pairs"][None]), "state['similarity']['pairs'] has shape "
     "(1, {m}), but this run's is 1-D (of any length)"),
    (lambda r: r.update(distances=r["distances"].float()),
     "state['similarity']['distances'] has dtype torch.float32"),
    (lambda r: r["distances"].__setitem__(0, float("nan")),
     "state['similarity']['distances'] holds 1 NaN or infinite entries"),
    (lambda r: r["distances"].__setitem__(0, INF),
     "state['similarity']['distances'] holds 1 NaN or infinite entries"),
    (lambda r: r.pop("distances"), "state['similarity'] has no entry 'distances'"),
])
def test_a_checkpoint_with_an_unlike_record_is_refused_naming_the_file(tmp_path, edit,
                                                                       message):
    path = _saved_with(tmp_path, edit)
    m = read_checkpoint(path)["state"]["similarity"]["pairs"].shape[-1]
    with pytest.raises(ConfigError) as exc:
        _run(SimilarityCompensation, "fed_avg", 5, checkpoint=path, resume=True)
    assert str(path) in str(exc.value) and message.format(m=m) in str(exc.value)


@pytest.mark.parametrize("edit,message", [
    (lambda r: r.update(pairs=r["pairs"].flip(0), distances=r["distances"].flip(0)),
     "not strictly increasing"),
    (lambda r: r.update(distances=r["distances"][1:]), "pairs but"),
    (lambda r: r.update(distances=-r["distances"]), "negative"),
])
def test_a_checkpoint_with_a_damaged_record_is_refused_before_its_round(tmp_path, edit,
                                                                        message):
    path = _saved_with(tmp_path, edit)
    with pytest.raises(ConfigError, match=message):
        _run(SimilarityCompensation, "fed_avg", 5, checkpoint=path, resume=True)


def test_the_experiments_heat_map_reads_the_record_as_a_matrix(tmp_path):
    from fedsparse.experiments.safari import distance_record

    path = tmp_path / "c.pt"
    _, records = _run(SimilarityCompensation, "fed_avg", 3, checkpoint=path)
    rho = distance_record(path, N_CLIENTS)
    assert rho.shape == (N_CLIENTS, N_CLIENTS) and torch.equal(rho, rho.T)
    assert int(torch.isfinite(rho).sum()) == 2 * records[-1]["pairs"].numel()


def test_a_million_clients_run_with_a_record_of_the_measured_pairs_only():
    # the dense record would need 8 TB (the memory check refused the run); the sparse one
    # holds each round's R (R - 1) / 2 received pairs (20 of 10^6 sampled: no pair twice)
    data = fs.data.shifted_gaussian(num_clients=10**6, samples_per_client=4, dim=6,
                                    sparsity=2, seed=0, lazy=True, dtype=torch.float64)
    sizes = []
    h = fs.simulate(SimilarityCompensation(INNER["fed_avg"]()), fs.problems.least_squares(),
                    data, rounds=2, clients_per_round=20, eval_clients=20,
                    channel=fs.channels.BernoulliChannel(0.7),
                    callback=lambda r, s: sizes.append(s["similarity"]["pairs"].numel()))
    arrived = h.column("delivered")
    assert sizes[-1] == sum(r * (r - 1) // 2 for r in arrived) > 0
    # no lost client was ever received with this round's arrivals: all are dropped
    assert h.column("dropped") == [20 - r for r in arrived] and sum(arrived) < 40


def test_more_clients_than_int64_pair_keys_hold_are_refused():
    from fedsparse.algorithms.base import DataSpec
    from fedsparse.algorithms.compensation import MAX_CLIENTS

    assert MAX_CLIENTS**2 < 2**63 <= (MAX_CLIENTS + 1) ** 2
    algo = fs.algorithms.similarity_compensation(INNER["fed_avg"]())
    spec = DataSpec(MAX_CLIENTS + 1, (2,), torch.float64, torch.ones(1))
    with pytest.raises(ConfigError, match=f"num_clients={MAX_CLIENTS + 1} is invalid"):
        algo.bind(fs.problems.least_squares(), spec)
