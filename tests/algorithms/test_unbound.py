"""Only a bound algorithm runs: every round method of an unbound one refuses with a clear
error, for every registered algorithm and for a subclass written by a user, and nothing
derived from the problem has a default that could stand in for the bound value."""

import inspect

import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.algorithms import REGISTRY, Algorithm, ClientContext, Cohort
from fedsparse.algorithms.base import payload_rows, weighted_mean

#: Every method of a round (server and client halves, the records): none may run unbound.
ROUND_METHODS = ("init", "init_clients", "broadcast", "client_config", "client_update",
                 "aggregate", "model", "round_metrics", "personalized")

#: Arguments that make every registered builder valid (defaults elsewhere).
ARGS = {"sparsity": 2, "mu": 0.1, "density": 0.5, "lam": 0.1, "step_size": 0.1,
        "personal_step_size": 0.1, "inner_step_size": 0.1, "alpha_k": 0.5, "sigma": 1.0}


def _build(kind, **extra):
    accepted = inspect.signature(REGISTRY[kind]).parameters
    return REGISTRY[kind](**{k: v for k, v in {**ARGS, **extra}.items() if k in accepted})


def _softmax_case():
    data = fs.data.fedprox_synthetic(num_clients=3, dim=6, num_classes=3, seed=0,
                                     dtype=torch.float64)
    return fs.problems.softmax(num_classes=3), data


def _arguments(method, problem):
    """Plausible arguments of a round method (the refusal must come before they are used)."""
    clients = torch.arange(3)
    model = torch.zeros(18, dtype=torch.float64)
    state = {"model": model, "step_size": 0.1}
    cohort = Cohort(0, clients, torch.full((3,), 1 / 3, dtype=torch.float64),
                    torch.ones(3, dtype=torch.bool))
    return {"init": (problem,), "init_clients": (problem, clients),
            "broadcast": (state, clients), "client_config": (state,),
            "client_update": (model, None), "aggregate": (state, model.expand(3, -1), cohort),
            "model": (state,), "round_metrics": (state,), "personalized": (state, None)}[method]


@pytest.mark.parametrize("kind", sorted(REGISTRY))
@pytest.mark.parametrize("method", ROUND_METHODS)
def test_every_round_method_of_an_unbound_algorithm_refuses(kind, method):
    problem, _ = _softmax_case()
    algos = [_build(kind)] + ([_build(kind, compensation=False)] if kind == "safari" else [])
    for algo in algos:
        with pytest.raises(ConfigError, match=rf"{algo.name}\.{method}\(\) needs a bound "
                                              r"algorithm: call algorithm = algorithm\.bind"):
            getattr(algo, method)(*_arguments(method, problem))


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_nothing_bind_derives_has_a_default_on_the_unbound_algorithm(kind):
    # an attribute that bind sets must not exist before binding, not even on the class:
    # a default there (blocks = 1, spec = None) stands in for the bound value
    problem, data = _softmax_case()
    algo = _build(kind)
    bound = algo.bind(problem, data)
    derived = set(vars(bound)) - set(vars(algo))
    assert "spec" in derived
    for name in derived:
        assert not hasattr(algo, name), f"{kind}.{name} has a value before bind"
    assert not algo.is_bound and bound.is_bound


def test_unbound_fed_iter_ht_refuses_where_it_used_to_threshold_the_wrong_rows():
    # bound, tau = 2 is kept in each of the 3 class rows; unbound it thresholded the
    # whole (3 x 6) model as one row and kept [0, 2, 0] entries per class
    problem, data = _softmax_case()
    clients = torch.arange(3)
    ctx = ClientContext(problem, data.train, clients, 0, 0, config={"step_size": 0.5})
    algo = fs.algorithms.fed_iter_ht(sparsity=2, step_size=0.5, local_steps=1)
    x0 = torch.zeros(18, dtype=torch.float64)
    with pytest.raises(ConfigError, match="fed_iter_ht.client_update"):
        algo.client_update(x0, ctx)
    uploads, _, _ = algo.bind(problem, data).client_update(x0, ctx)
    assert (uploads != 0).reshape(3, 3, 6).sum(-1).tolist() == [[2, 2, 2]] * 3


def test_composite_prox_refuses_unbound_only_where_it_needs_the_class_rows():
    problem, data = _softmax_case()
    v = torch.arange(18, dtype=torch.float64)
    with pytest.raises(ConfigError, match="is not bound"):
        fs.algorithms.fed_mid(sparsity=2).prox(v, 1.0)
    rows = fs.algorithms.fed_mid(sparsity=2).bind(problem, data).prox(v, 1.0)
    assert (rows != 0).reshape(3, 6).sum(-1).tolist() == [2, 2, 2]
    fs.algorithms.fed_mid(regularizer="l1", penalty=1.0).prox(v, 1.0)  # entrywise: fine


def test_a_user_subclass_is_checked_without_writing_the_check():
    class Mine(Algorithm):
        name = "mine"

        def client_update(self, payload, ctx):
            return payload_rows(payload, ctx.size), None, {}

        def aggregate(self, state, uploads, cohort):
            return {**state, "model": weighted_mean(uploads, cohort)}

    problem, data = _softmax_case()
    with pytest.raises(ConfigError, match=r"mine\.aggregate\(\) needs a bound algorithm"):
        Mine().aggregate(*_arguments("aggregate", problem))
    h = fs.simulate(Mine(), problem, data, rounds=1)  # simulate binds it
    assert len(h.records) == 1
