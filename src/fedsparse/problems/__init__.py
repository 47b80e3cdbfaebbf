"""Learning problems: losses and gradients batched over clients and examples."""

from .base import Problem
from .dictionary import DictionaryProblem
from .linear import LeastSquares, Logistic, Softmax, least_squares, logistic, softmax

#: Builders by name, as used in experiment configs (``problem.kind``).
REGISTRY = {"least_squares": least_squares, "logistic": logistic, "softmax": softmax}

__all__ = ["REGISTRY", "DictionaryProblem", "LeastSquares", "Logistic", "Problem", "Softmax",
           "least_squares",
           "logistic",
           "softmax"]
