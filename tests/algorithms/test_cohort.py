"""The server half's random source: ``Cohort.random`` is the clients' ``ClientContext.random``
stream, and the round loop (also under similarity compensation) gives the cohort the
run's seed."""

import torch

import fedsparse as fs
from fedsparse.algorithms import ClientContext, Cohort
from fedsparse.algorithms.fedavg import FederatedAveraging

F64 = torch.float64


def _data():
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(6, 3, generator=gen, dtype=F64) for _ in range(4)]
    return fs.data.from_arrays(xs, [x.sum(1) for x in xs], dtype=F64)


def test_cohort_random_is_the_client_stream():
    data, clients = _data(), torch.tensor([0, 2, 3])
    ctx = ClientContext(fs.problems.least_squares(), data.train, clients, 4, 11)
    cohort = Cohort(4, clients, data.weights[clients], torch.ones(3, dtype=torch.bool), seed=11)
    for counters in [(), (-1,), (7, 2)]:
        assert torch.equal(cohort.random(*counters), ctx.random(*counters))
    other = Cohort(4, clients, data.weights[clients], torch.ones(3, dtype=torch.bool), seed=12)
    assert not torch.equal(other.random(-1), cohort.random(-1))


class _SeedRecorder(FederatedAveraging):
    """FedAvg that notes the seed of every cohort it aggregates (its bound copies share
    the list)."""

    def __init__(self):
        super().__init__("fed_avg", step_size=0.01, local_steps=1, batch_size=None,
                         optimizer="sgd", momentum=0.0, mu=0.0)
        self.seen = []

    def aggregate(self, state, uploads, cohort):
        self.seen.append(cohort.seed)
        return super().aggregate(state, uploads, cohort)


def test_the_round_loop_gives_the_cohort_the_run_seed():
    algo = _SeedRecorder()
    fs.simulate(algo, fs.problems.least_squares(), _data(), rounds=3, seed=7)
    assert algo.seen == [7, 7, 7]


def test_similarity_compensation_passes_the_seed_on():
    algo = _SeedRecorder()
    fs.simulate(fs.algorithms.similarity_compensation(algo), fs.problems.least_squares(),
                _data(), rounds=2, seed=5)
    assert algo.seen == [5, 5]
