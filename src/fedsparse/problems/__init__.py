"""Learning problems: losses and gradients batched over clients and examples."""

from .base import Problem
from .linear import LeastSquares, Logistic, Softmax, least_squares, logistic, softmax

__all__ = ["LeastSquares", "Logistic", "Problem", "Softmax", "least_squares", "logistic",
           "softmax"]
