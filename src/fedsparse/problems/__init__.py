"""Learning problems: losses and gradients batched over clients and examples.

:class:`Problem` is the protocol the library calls; :class:`LinearProblem` is a linear
model driven by one per-example link (:mod:`.links`), :class:`NeuralProblem` a torch
network, :class:`DictionaryProblem` a linear problem seen through a dictionary.
"""

from .dictionary import DictionaryProblem
from .linear import (
    LeastSquares,
    LinearProblem,
    Logistic,
    Softmax,
    least_squares,
    logistic,
    softmax,
)
from .links import BinaryLogistic, Link, SoftmaxCrossEntropy, SquaredError
from .neural import NeuralProblem, neural
from .neural_spec import neural_from_spec
from .protocol import Problem


def neural_model(*, model: dict, path: str = "auto", chunk_clients: int | None = None,
                 autocast: str | None = None) -> NeuralProblem:
    """The ``neural`` problem of an experiment config: ``model`` is a table naming a model
    of :data:`fedsparse.models.REGISTRY` and its arguments, e.g.
    ``{kind = "mlp", in_features = 784, hidden = [100], num_classes = 10}``; ``path``,
    ``chunk_clients`` and ``autocast`` as :class:`NeuralProblem` takes them."""
    return neural_from_spec(model, path=path, chunk_clients=chunk_clients,
                            autocast=autocast)


#: Builders by name, as used in experiment configs (``problem.kind``).
REGISTRY = {"least_squares": least_squares, "logistic": logistic, "softmax": softmax,
            "neural": neural_model}

__all__ = ["REGISTRY", "BinaryLogistic", "DictionaryProblem", "LeastSquares",
           "LinearProblem", "Link", "Logistic", "NeuralProblem", "Problem", "Softmax",
           "SoftmaxCrossEntropy", "SquaredError",
           "least_squares",
           "logistic",
           "neural",
           "neural_from_spec",
           "softmax"]
