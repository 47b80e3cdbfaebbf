"""fedsparse: sparse federated learning on one vectorised core.

>>> import fedsparse as fs
>>> data = fs.data.shifted_gaussian(num_clients=10, dim=100, sparsity=5, seed=0)
>>> algo = fs.algorithms.fed_iter_ht(sparsity=5, step_size="auto", local_steps=5)
>>> history = fs.simulate(algo, fs.problems.least_squares(), data, rounds=20, seed=0)
"""

from . import algorithms, channels, comm, data, problems, sparsity
from ._validation import ConfigError
from .history import History
from .simulate import DivergenceError, simulate

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DivergenceError",
    "History",
    "algorithms",
    "channels",
    "comm",
    "data",
    "problems",
    "simulate",
    "sparsity",
]
