"""A problem whose parameters are dictionary coefficients: ``loss(a) = f(A a)``.

Jeong et al. 2024 (Sec. II, IV-D): a model sparse in a dictionary ``A`` (d x m, atoms as
columns) is kept and sent as its coefficients ``a``. Wrapping the problem keeps every
algorithm and the simulator unaware of dictionaries: for the wrapper, the parameters
are the coefficients (per class row for softmax: ``C * m`` entries), the gradient is
``A^T grad f(A a)`` and the restricted solve works on the features ``X A``.
"""

from __future__ import annotations

import hashlib

import torch

from .._validation import ConfigError
from .base import Problem, gram_lambda_max
from .linear import LinearProblem


class DictionaryProblem(Problem):
    """``problem`` seen through the dictionary ``A``: parameters are coefficients.

    Parameters
    ----------
    problem : a :class:`~fedsparse.problems.linear.LinearProblem` (least squares,
        logistic, softmax); its link is the wrapper's link.
    dictionary : (d, m) tensor or :class:`fedsparse.sparsity.Dictionary`.

    Notes
    -----
    Used directly with :func:`fedsparse.simulate`, every metric is in coefficient
    space: a data set's ``ground_truth`` must then be the (C*m,) coefficient vector.
    The algorithms' own ``dictionary=`` argument wraps the problem internally and
    evaluates the signal ``A a`` instead (see :mod:`fedsparse.algorithms.gradmp`).
    """

    def __init__(self, problem: Problem, dictionary):
        from ..sparsity.dictionaries import Dictionary

        if isinstance(problem, DictionaryProblem):
            raise ConfigError("a DictionaryProblem cannot wrap another DictionaryProblem")
        if not isinstance(problem, LinearProblem):
            raise ConfigError(f"problem={problem!r} is invalid: a dictionary needs a linear "
                              "problem (least_squares, logistic, softmax), whose scores are "
                              "linear in the model")
        self.base = problem
        self.dictionary = dictionary if isinstance(dictionary, Dictionary) else \
            Dictionary(dictionary)
        self.name = f"{problem.name}@dictionary"
        self.link = problem.link
        self.blocks = problem.blocks
        self.task = problem.task
        self.capabilities = problem.capabilities

    @property
    def matrix(self) -> torch.Tensor:
        return self.dictionary.matrix

    def __repr__(self) -> str:
        # the atoms' digest: two dictionaries of one spec text may hold other atoms
        atoms = self.matrix.detach().cpu().contiguous().numpy()
        digest = hashlib.blake2b(atoms.tobytes(), digest_size=8).hexdigest()
        return f"DictionaryProblem({self.base!r}, {self.dictionary!r}, atoms={digest})"

    def param_dim(self, feature_dim: int) -> int:
        if feature_dim != self.dictionary.dim:
            raise ConfigError(f"the dictionary has atoms of length {self.dictionary.dim} but "
                              f"the data has {feature_dim} features")
        return self.dictionary.atoms * self.blocks

    def check_data(self, data) -> None:
        self.base.check_data(data)

    def signal(self, params: torch.Tensor) -> torch.Tensor:
        """Coefficients (..., C*m) to the model in feature space (..., C*d)."""
        A = self.dictionary.matrix_on(params.device).to(params.dtype)
        shape = params.shape
        a = params.reshape(*shape[:-1], self.blocks, A.shape[1])
        return (a @ A.T).reshape(*shape[:-1], self.blocks * A.shape[0])

    def coefficient_grad(self, signal_grad: torch.Tensor) -> torch.Tensor:
        """``A^T g`` per class row: (..., C*d) signal gradients to (..., C*m)."""
        A = self.dictionary.matrix_on(signal_grad.device).to(signal_grad.dtype)
        shape = signal_grad.shape
        g = signal_grad.reshape(*shape[:-1], self.blocks, A.shape[0])
        return (g @ A).reshape(*shape[:-1], self.blocks * A.shape[1])

    def loss(self, params, X, y, w):
        return self.base.loss(self.signal(params), X, y, w)

    def grad(self, params, X, y, w):
        return self.coefficient_grad(self.base.grad(self.signal(params), X, y, w))

    def accuracy(self, params, X, y, w):
        return self.base.accuracy(self.signal(params), X, y, w)

    def curvature_scale(self):
        return self.base.curvature_scale()

    def l2(self):
        return self.base.l2()

    def lipschitz(self, X, w, iterations: int = 50):
        A = self.dictionary.matrix_on(X.device).to(X.dtype)
        lam = gram_lambda_max(X @ A, w, iterations)
        return self.base.curvature_scale() * lam + self.base.l2() * \
            torch.linalg.matrix_norm(A, ord=2) ** 2

    def restricted_solve(self, index, valid, X, y, w, init=None, *, method: str = "exact",
                         tol: float = 1e-10, max_iter: int = 100):
        """:meth:`~fedsparse.problems.linear.LinearProblem.restricted_solve` over the chosen
        atoms: the same solvers on the features ``X A`` (coefficients (S, k))."""
        from .restricted import solve_restricted

        return solve_restricted(self, index, valid, X, y, w, init, method=method, tol=tol,
                                max_iter=max_iter)

    def restricted_features(self, index, X):
        A = self.dictionary.matrix_on(X.device).to(X.dtype)
        m = A.shape[1]
        XA = X @ A                                          # (S, n, m) features of atoms
        Z = torch.gather(XA, 2, (index % m).unsqueeze(1).expand(-1, X.shape[1], -1))
        return Z, torch.div(index, m, rounding_mode="floor")

    def restricted_metric(self, index, valid):
        if not self.base.l2():
            return None
        # ||x||^2 = sum_r ||A a_r||^2: the Gram of the chosen atoms within a class row.
        A = self.dictionary.matrix_on(index.device)
        m = A.shape[1]
        cols = A.T[index % m]                               # (S, k, d)
        cls = torch.div(index, m, rounding_mode="floor")
        same = (cls.unsqueeze(-1) == cls.unsqueeze(-2)).to(A.dtype)
        vm = valid.to(A.dtype)
        return torch.bmm(cols, cols.transpose(1, 2)) * same * vm.unsqueeze(-1) * vm.unsqueeze(-2)
