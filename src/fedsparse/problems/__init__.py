"""Learning problems: losses and gradients batched over clients and examples."""

from .base import Problem
from .dictionary import DictionaryProblem
from .linear import LeastSquares, Logistic, Softmax, least_squares, logistic, softmax
from .neural import NeuralProblem, neural, neural_from_spec


def neural_model(*, model: dict, path: str = "auto", chunk_clients: int | None = None
                 ) -> NeuralProblem:
    """The ``neural`` problem of an experiment config: ``model`` is a table naming a model
    of :data:`fedsparse.models.REGISTRY` and its arguments, e.g.
    ``{kind = "mlp", in_features = 784, hidden = [100], num_classes = 10}``."""
    return neural_from_spec(model, path=path, chunk_clients=chunk_clients)


#: Builders by name, as used in experiment configs (``problem.kind``).
REGISTRY = {"least_squares": least_squares, "logistic": logistic, "softmax": softmax,
            "neural": neural_model}

__all__ = ["REGISTRY", "DictionaryProblem", "LeastSquares", "Logistic", "NeuralProblem",
           "Problem", "Softmax",
           "least_squares",
           "logistic",
           "neural",
           "neural_from_spec",
           "softmax"]
