"""Dictionaries, approx_tau and K-SVD."""

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.sparsity import Dictionary, approx_projection, as_dictionary

DT = torch.float64


def test_gaussian_dictionary_is_seeded_and_roughly_unit_norm():
    D = fs.sparsity.gaussian_dictionary(dim=784, atoms=200, seed=0)
    assert D.shape == (784, 200)
    assert torch.equal(D, fs.sparsity.gaussian_dictionary(dim=784, atoms=200, seed=0))
    assert not torch.equal(D, fs.sparsity.gaussian_dictionary(dim=784, atoms=200, seed=1))
    norms = torch.linalg.vector_norm(D, dim=0)
    assert (norms - 1).abs().max() < 0.2


def test_approx_identity_is_hard_threshold():
    w = torch.tensor([[0.5, -3.0, 2.0, 2.0]], dtype=DT)
    coef, index, res = approx_projection(w, 2)
    assert torch.equal(coef, fs.sparsity.hard_threshold(w, 2))
    assert index.tolist() == [[1, 2]]                        # tie 2.0/2.0 -> lower index
    assert torch.allclose(res, torch.tensor([np.hypot(0.5, 2.0)], dtype=DT))
    eye = fs.sparsity.identity_dictionary(4)
    coef2, _, _ = approx_projection(w, 2, eye)
    assert torch.allclose(coef2, coef)


def test_approx_orthonormal_dictionary_is_thresholding_in_that_basis():
    Q, _ = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(0),
                                       dtype=DT))
    w = torch.randn(3, 6, dtype=DT)
    coef, _, res = approx_projection(w, 2, Q)
    assert torch.allclose(coef, fs.sparsity.hard_threshold(w @ Q, 2), atol=1e-12)
    assert torch.allclose(res, torch.linalg.vector_norm(w - coef @ Q.T, dim=-1), atol=1e-12)


def test_projection_is_least_squares_on_chosen_atoms():
    D = fs.sparsity.gaussian_dictionary(dim=10, atoms=15, seed=2)
    w = torch.randn(10, dtype=DT)
    coef, index, res = approx_projection(w, 3, D)
    cols = D[:, index]
    ref = torch.linalg.lstsq(cols, w.unsqueeze(-1)).solution.squeeze(-1)
    assert torch.allclose(coef[index], ref, atol=1e-10)
    assert (coef != 0).sum() <= 3
    # chosen atoms have the largest normalised correlations
    score = (D.T @ w).abs() / torch.linalg.vector_norm(D, dim=0)
    assert set(index.tolist()) == set(torch.topk(score, 3).indices.tolist())


def test_coefficient_rule_keeps_sparse_models_fixed():
    D = Dictionary(fs.sparsity.gaussian_dictionary(dim=30, atoms=60, seed=0))
    a = torch.zeros(60, dtype=DT)
    a[[3, 17, 40]] = torch.tensor([1.0, -0.2, 0.05], dtype=DT)
    coef, index = D.approx_coefficients(a, 3)
    assert torch.allclose(coef, a, atol=1e-12)
    coef2, _, res = approx_projection(None, 3, D, coefficients=a)
    assert torch.allclose(coef2, a, atol=1e-12) and res.item() < 1e-12


def test_coefficient_rule_ranks_atoms_by_coefficient_times_atom_norm():
    # A = [[2, 0], [0, 1]], a = (1, 1.5): |a_0| ||A_0|| = 2 beats |a_1| ||A_1|| = 1.5, so
    # tau = 1 keeps atom 0; the model A a = (2, 1.5) projected on it is (2, 0): a = (1, 0),
    # residual |1.5|
    D = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=DT)
    coef, index, res = approx_projection(None, 1, D,
                                         coefficients=torch.tensor([1.0, 1.5], dtype=DT))
    assert index.tolist() == [0]
    assert torch.allclose(coef, torch.tensor([1.0, 0.0], dtype=DT), atol=1e-12)
    assert res.item() == pytest.approx(1.5, abs=1e-12)


def test_as_dictionary_specs_and_errors(tmp_path):
    assert as_dictionary(None, dim=5) is None
    assert as_dictionary({"kind": "identity"}, dim=5) is None
    g = as_dictionary({"kind": "gaussian", "atoms": 7, "seed": 1}, dim=5)
    assert g.matrix.shape == (5, 7)
    np.save(tmp_path / "D.npy", np.ones((5, 2)))
    assert as_dictionary({"kind": "file", "path": str(tmp_path / "D.npy")}, dim=5).atoms == 2
    with pytest.raises(ConfigError, match="dictionary shape"):
        as_dictionary(torch.ones(4, 2), dim=5)
    with pytest.raises(ConfigError, match="unknown keys"):
        as_dictionary({"kind": "gaussian", "atoms": 3, "sd": 1}, dim=5)
    with pytest.raises(ConfigError, match="zero atom"):
        as_dictionary(torch.zeros(5, 2), dim=5)


def test_dictionary_refuses_nan_and_bad_matrices():
    for bad in (float("nan"), float("inf"), -float("inf")):
        m = torch.randn(5, 3, dtype=DT)
        m[2, 1] = bad
        with pytest.raises(ConfigError, match=r"dictionary holds NaN or infinite entries "
                           r"\(the first at row 2, atom 1"):
            as_dictionary(m, dim=5)
        with pytest.raises(ConfigError, match="NaN or infinite"):
            Dictionary(m)
        with pytest.raises(ConfigError, match="NaN or infinite"):
            approx_projection(torch.ones(5, dtype=DT), 1, m)
        with pytest.raises(ConfigError, match="NaN or infinite"):
            fs.problems.DictionaryProblem(fs.problems.least_squares(), m.numpy())
    # float64 entries beyond float32's range overflow when cast: refused, not inf
    with pytest.raises(ConfigError, match="NaN or infinite"):
        as_dictionary(torch.full((5, 2), 1e300, dtype=DT), dim=5, dtype=torch.float32)
    for bad, pattern in [(torch.ones(5, 0), r"shape \(5, 0\)"), (torch.ones(5), r"shape \(5,\)"),
                         (torch.ones(5, 2, dtype=torch.complex128), "complex128"),
                         (torch.ones(5, 2, dtype=torch.bool), "torch.bool"),
                         (np.array([["a", "b"]] * 5), "real numbers")]:
        with pytest.raises(ConfigError, match=pattern):
            Dictionary(bad)
    # arrays and integer matrices are accepted (as float64)
    D = Dictionary(np.arange(1, 11).reshape(5, 2))
    assert D.matrix.dtype == DT and D.atoms == 2
    with pytest.raises(ConfigError, match="dictionary='gaussian' is invalid"):
        as_dictionary("gaussian", dim=5)


@pytest.mark.parametrize("call, message", [
    (lambda D, w: D.synthesis(w), r"a='tensor of shape \(3, 5\)' is invalid: must have shape "
                                  r"\(\.\.\., 8\): m = 8 for Dictionary"),
    (lambda D, w: D.analysis(w.T), r"w='tensor of shape \(5, 3\)'.*\(\.\.\., 5\): d = 5"),
    (lambda D, w: D.analysis(w.numpy()), "w='ndarray' is invalid: must be a torch tensor"),
    (lambda D, w: D.analysis(w.long()), "must be a floating-point tensor"),
    (lambda D, w: D.project(w, torch.zeros(2, 2, dtype=torch.int64)),
     r"index=.*leading shape \(3,\)"),
    (lambda D, w: D.project(w, torch.zeros(3, 2)), r"index=.*must be an int64 tensor"),
    (lambda D, w: D.approx(w, 0), "k=0 is invalid: must be at least 1"),
    (lambda D, w: D.approx_coefficients(w, 2), r"a='tensor of shape \(3, 5\)'"),
])
def test_dictionary_methods_name_a_wrong_argument(call, message):
    D = as_dictionary({"kind": "gaussian", "atoms": 8, "seed": 0}, dim=5)
    with pytest.raises(ConfigError, match=message):
        call(D, torch.ones(3, 5, dtype=torch.float64))


def test_dictionary_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.npy"
    with pytest.raises(ConfigError, match=f"dictionary file '{missing}' does not exist"):
        as_dictionary({"kind": "file", "path": str(missing)}, dim=5)
    with pytest.raises(ConfigError, match="is not a regular file"):
        as_dictionary({"kind": "file", "path": str(tmp_path)}, dim=5)
    with pytest.raises(ConfigError, match="a file dictionary needs path="):
        as_dictionary({"kind": "file"}, dim=5)
    with pytest.raises(ConfigError, match="dictionary path=3 is invalid"):
        as_dictionary({"kind": "file", "path": 3}, dim=5)
    m = np.ones((5, 3))
    m[4, 2] = np.nan
    np.save(tmp_path / "nan.npy", m)
    with pytest.raises(ConfigError, match=r"dictionary file '.*nan.npy' holds NaN or infinite "
                       r"entries \(the first at row 4, atom 2"):
        as_dictionary({"kind": "file", "path": str(tmp_path / "nan.npy")}, dim=5)
    np.save(tmp_path / "wide.npy", np.ones((4, 3)))
    with pytest.raises(ConfigError, match=r"wide.npy': dictionary shape \(4, 3\) is invalid.*"
                       "feature dimension 5"):
        as_dictionary({"kind": "file", "path": str(tmp_path / "wide.npy")}, dim=5)
    (tmp_path / "junk.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(ConfigError, match="junk.npy' could not be read as a .npy array"):
        as_dictionary({"kind": "file", "path": str(tmp_path / "junk.npy")}, dim=5)
    (tmp_path / "text.npy").write_text("hello")  # NumPy alone calls it a refused pickle
    with pytest.raises(ConfigError, match="text.npy' is not a .npy file .*magic bytes"):
        as_dictionary({"kind": "file", "path": str(tmp_path / "text.npy")}, dim=5)
    np.save(tmp_path / "obj.npy", np.array([[1, None]] * 5, dtype=object))
    with pytest.raises(ConfigError, match="obj.npy' could not be read"):
        as_dictionary({"kind": "file", "path": str(tmp_path / "obj.npy")}, dim=5)
    np.savez(tmp_path / "d.npz", a=np.ones((5, 2)))
    with pytest.raises(ConfigError, match=r"d.npz' is a zip archive \(.npz\?\)"):
        as_dictionary({"kind": "file", "path": str(tmp_path / "d.npz")}, dim=5)
    # a header claiming a (10^6, 10^6) array in a 192-byte file: refused, not allocated
    import numpy.lib.format as fmt

    with open(tmp_path / "huge.npy", "wb") as fh:
        fmt.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False,
                                        "shape": (10**6, 10**6)})
        fh.write(bytes(64))
    with pytest.raises(ConfigError, match="huge.npy' could not be read"):
        as_dictionary({"kind": "file", "path": str(tmp_path / "huge.npy")}, dim=10**6)
    # a big-endian file (written on another machine) is read like any other
    np.save(tmp_path / "be.npy", np.arange(1, 11, dtype=">f8").reshape(5, 2))
    D = as_dictionary({"kind": "file", "path": str(tmp_path / "be.npy")}, dim=5)
    assert D.matrix[4, 1].item() == 10.0 and D.spec["kind"] == "file"


def test_omp_recovers_exactly_sparse_codes():
    D = fs.sparsity.gaussian_dictionary(dim=40, atoms=60, seed=0)
    D = D / torch.linalg.vector_norm(D, dim=0)
    codes = torch.zeros(5, 60, dtype=DT)
    g = torch.Generator().manual_seed(1)
    for i in range(5):
        codes[i, torch.randperm(60, generator=g)[:3]] = torch.randn(3, generator=g, dtype=DT) + 2
    est = fs.sparsity.omp(D, codes @ D.T, 3)
    assert torch.allclose(est, codes, atol=1e-9)


def test_omp_picks_atoms_by_normalised_correlation():
    # atoms (2, 0) and (0, 1), signal (1, 1.2): the correlations over the atom norms are
    # 2 / 2 = 1 and 1.2 / 1 = 1.2, so one step picks atom 1 with code 1.2 (the raw
    # correlations 2 > 1.2 would pick atom 0 with code 0.5)
    D = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=DT)
    est = fs.sparsity.omp(D, torch.tensor([[1.0, 1.2]], dtype=DT), 1)
    assert torch.allclose(est, torch.tensor([[0.0, 1.2]], dtype=DT), atol=1e-9)


def _signals(n=120, d=20, atoms=12, s=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    D = torch.randn(d, atoms, generator=g, dtype=DT)
    D = D / torch.linalg.vector_norm(D, dim=0)
    X = torch.zeros(n, atoms, dtype=DT)
    for i in range(n):
        X[i, torch.randperm(atoms, generator=g)[:s]] = torch.randn(s, generator=g, dtype=DT)
    return X @ D.T + 0.01 * torch.randn(n, d, generator=g, dtype=DT)


def test_ksvd_error_is_monotone_and_decreases():
    Y = _signals()
    D, info = fs.sparsity.ksvd(Y, atoms=12, sparsity=3, iterations=15, seed=0, return_info=True)
    errs = info["errors"]
    assert D.shape == (20, 12)
    assert torch.allclose(torch.linalg.vector_norm(D, dim=0), torch.ones(12, dtype=DT))
    assert all(b <= a * (1 + 1e-12) for a, b in zip(errs, errs[1:], strict=False))
    assert errs[-1] < 0.5 * errs[0]
    assert ((info["codes"] != 0).sum(-1) <= 3).all()


def test_ksvd_replaces_unused_atoms_and_accepts_numpy():
    # more atoms than distinct directions: some atoms go unused and must be replaced
    Y = np.repeat(np.eye(4), 3, axis=0) * np.arange(1, 13)[:, None]
    D = fs.sparsity.ksvd(Y, atoms=8, sparsity=1, iterations=3, seed=0)
    assert D.shape == (4, 8) and torch.isfinite(D).all()
    with pytest.raises(ConfigError, match="sparsity"):
        fs.sparsity.ksvd(Y, atoms=3, sparsity=4)


def test_ksvd_refuses_non_finite_signals():
    Y = torch.ones(6, 4)
    Y[2, 1] = float("nan")
    with pytest.raises(fs.ConfigError, match="signals="):
        fs.sparsity.ksvd(Y, atoms=3, sparsity=1)
