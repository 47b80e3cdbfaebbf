"""`fedsparse data describe` and the real-data builders behind it."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import fedsparse as fs
from fedsparse._validation import ConfigError
from fedsparse.cli import main
from fedsparse.data.real import _scale


def test_describe_label_skew_prints_sizes_histogram_and_plots(tmp_path, capsys):
    png = tmp_path / "split.png"
    assert main(["data", "describe", "digits", "--partition", "label_skew", "--clients", "20",
                 "--labels-per-client", "2", "--seed", "0", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "digits: 1797 examples x 64 features (dense)" in out
    assert "labels per client: min 2, max 2" in out
    assert "duplicates 0" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()
            and len(line.split()) == 12]
    assert len(rows) == 20  # client, size, 10 label counts
    hist = np.array([[int(v) for v in r[2:]] for r in rows])
    assert ((hist > 0).sum(1) == 2).all() and hist.sum() == 1797
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_describe_never_writes_its_plot_over_a_file(tmp_path, cli):
    config = tmp_path / "my.toml"
    config.write_text("rounds = 3\n")
    args = ["data", "describe", "digits", "--clients", "4", "--plot", str(config)]
    cli.refused(args, f"--plot={str(config)!r} is invalid: the file exists", "--force")
    assert config.read_text() == "rounds = 3\n"
    assert cli.run(args + ["--force"])[0] == 0
    assert config.read_bytes()[:4] == b"\x89PNG"


def test_describe_is_reproducible_and_seeded(capsys):
    args = ["data", "describe", "digits", "--partition", "dirichlet", "--clients", "8",
            "--alpha", "0.3", "--seed"]
    main(args + ["1"])
    a = capsys.readouterr().out
    main(args + ["1"])
    assert capsys.readouterr().out == a
    main(args + ["2"])
    assert capsys.readouterr().out != a


def test_describe_clusters_regression_and_errors(capsys):
    assert main(["data", "describe", "diabetes", "--partition", "clusters", "--clients", "25",
                 "--parts-per-cluster", "5"]) == 0
    out = capsys.readouterr().out
    assert "25 clients, 442 examples" in out and "labels per client" not in out
    for dataset, what in (("e2006", "E2006-tfidf LibSVM file, d = 150,360"),
                          ("rcv1", "RCV1 binary LibSVM file"), ("libsvm", "any LibSVM")):
        # the option to add and the file it names, not the loader's "--path=None"
        assert main(["data", "describe", dataset]) == 2
        err = capsys.readouterr().err
        assert f"data set {dataset!r} needs --path FILE, the file it reads: {what}" in err
        assert "None" not in err
    assert main(["data", "describe", "rcv1", "--path", "/nonexistent/rcv1"]) == 2
    assert "/nonexistent/rcv1" in capsys.readouterr().err
    assert main(["data", "describe", "digits", "--partition", "clusters", "--clients", "300"]) == 2
    assert "cannot assign parts" in capsys.readouterr().err
    # the default 10 clusters x 20 parts on 150 examples: named as the options were typed
    assert main(["data", "describe", "digits", "--partition", "clusters", "--max-examples",
                 "150"]) == 2
    err = capsys.readouterr().err
    assert "--parts-per-cluster=20 x --clusters=10 needs at least 200 examples" in err
    assert "the data have 150" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["data", "describe", "no_such_set"])


def test_libsvm_file_from_svmlight_keeps_sparse(tmp_path):
    from sklearn.datasets import dump_svmlight_file

    X, y = fs.data.breast_cancer()
    path = tmp_path / "bc.svm"
    dump_svmlight_file(X, y, str(path), zero_based=False)
    data = fs.data.libsvm_file(path, num_clients=25, parts_per_cluster=5, scale="maxabs",
                               seed=0, dtype=torch.float64)
    assert isinstance(data.train.X, fs.data.SparseRows)
    assert data.num_clients == 25 and data.dim == 30
    assert int(data.train.counts.sum() + data.test.counts.sum()) == 569
    assert float(data.train.X.val.abs().max()) <= 1.0 + 1e-12
    # the same through the config builder the runner uses
    from fedsparse.experiments.config import build_data

    again = build_data({"kind": "libsvm_file", "path": str(path), "num_clients": 25,
                        "parts_per_cluster": 5, "scale": "maxabs"}, torch.float64)
    torch.testing.assert_close(again.train.X.to_dense(), data.train.X.to_dense())


def test_federated_real_paper_split_and_errors():
    data = fs.data.federated_real("mnist_5k", partition="clusters", by_labels=True,
                                  num_clients=100, max_examples=2000, seed=0)
    assert data.num_clients == 100 and data.dim == 784
    per_client = [set(torch.unique(data.train.y[i, : data.train.counts[i]]).tolist())
                  for i in range(100)]
    assert all(len(s) <= 2 for s in per_client)
    with pytest.raises(ConfigError, match="dataset='nope'"):
        fs.data.federated_real("nope")
    with pytest.raises(ConfigError, match="partition 'iid'"):
        fs.data.federated_real("digits", partition="iid", alpha=0.1)
    with pytest.raises(ConfigError, match="scale='standard'.*densify"):
        _scale(sp.eye(3).tocsr(), "standard")


def test_a_path_is_refused_for_data_sets_not_read_from_disk(tmp_path, capsys):
    # a path that exists: the bundled data set would have been used in its place
    given = tmp_path / "mine.svm"
    given.write_text("1 1:2\n")
    for command in (["describe", "digits"], ["write", "digits", "--out", str(tmp_path / "w")]):
        assert main(["data", *command, "--path", str(given)]) == 2
        err = capsys.readouterr().err
        assert "--path applies to the data sets read from disk (" in err
        assert "not 'digits'" in err and "mnist" in err
    assert not (tmp_path / "w").exists()
    with pytest.raises(ConfigError, match=r"path='.*mine.svm' is invalid: data set 'mnist_5k' "
                       r"is not read from a file.*a path applies to e2006, fashion_mnist"):
        fs.data.federated_real("mnist_5k", path=str(given))
    from fedsparse.experiments.config import build_data

    for path in (str(given), "/no/such/file"):  # named as the config's key, exists or not
        with pytest.raises(ConfigError, match=r"data\.path='.*' is invalid: data set 'digits'"):
            build_data({"kind": "federated_real", "dataset": "digits", "path": path},
                       torch.float32)


def test_describe_ondisk_reads_a_written_folder(tmp_path, capsys):
    out = tmp_path / "digits"
    assert main(["data", "write", "digits", "--partition", "label_skew", "--clients", "6",
                 "--seed", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["data", "describe", "ondisk", "--path", str(out), "--plot",
                 str(tmp_path / "split.png")]) == 0
    printed = capsys.readouterr().out
    # the same counts as the split it was written from (its training part)
    eager = fs.data.federated_real("digits", partition="label_skew", num_clients=6, seed=3,
                                   test_fraction=0.2)
    y, counts = eager.train.y.long(), eager.train.counts
    hist = np.array([np.bincount(y[i, :counts[i]].numpy(), minlength=10) for i in range(6)])
    assert f"6 clients, {int(counts.sum())} examples, 10 labels" in printed
    for i in range(6):
        row = f"{i:6d} {int(counts[i]):6d} " + "".join(f"{v:>5d}" for v in hist[i])
        assert row in printed.splitlines(), row
    lpc = (hist > 0).sum(1)
    assert f"labels per client: min {lpc.min()}, max {lpc.max()}" in printed
    assert (tmp_path / "split.png").stat().st_size > 0


def test_describe_ondisk_lists_the_first_clients_of_many_and_refuses_split_options(
        tmp_path, capsys):
    out = tmp_path / "synthetic"
    assert main(["data", "write", "fedprox_synthetic", "--clients", "150", "--out",
                 str(out)]) == 0
    capsys.readouterr()
    assert main(["data", "describe", "ondisk", "--path", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "... and 100 more clients"
    assert lines[-2].split()[0] == "49"
    for option in (["--clients", "5"], ["--seed", "1"], ["--partition", "iid"],
                   ["--max-examples", "10"]):
        assert main(["data", "describe", "ondisk", "--path", str(out), *option]) == 2
        assert f"{option[0]}: a folder written by fedsparse data write is split" in \
            capsys.readouterr().err
    assert main(["data", "describe", "ondisk"]) == 2
    assert "ondisk needs --path DIR" in capsys.readouterr().err
    assert main(["data", "describe", "ondisk", "--path", str(tmp_path / "none")]) == 2
    assert "not a directory holding a federated data set" in capsys.readouterr().err


@pytest.mark.parametrize("scale", [[], ["--scale", "maxabs"]])
def test_describe_shows_the_clusters_split_that_write_and_a_config_build(tmp_path, capsys,
                                                                        scale):
    """K-means runs on the features as federated_real scales them (none unless asked), so
    the table ``describe`` prints is the split ``write`` stores and a config trains on."""
    split = ["breast_cancer", "--partition", "clusters", "--clients", "10", "--clusters", "5",
             "--parts-per-cluster", "4", *scale]
    assert main(["data", "describe", *split]) == 0
    described = capsys.readouterr().out.splitlines()
    out = tmp_path / "w"
    assert main(["data", "write", *split, "--test-fraction", "0", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["data", "describe", "ondisk", "--path", str(out)]) == 0
    written = capsys.readouterr().out.splitlines()
    table = described.index("10 clients, 569 examples, 2 labels, 0 unassigned")
    assert described[table + 1:] == written[written.index("10 clients, 569 examples, 2 labels")
                                            + 1:]
    data = fs.data.federated_real("breast_cancer", partition="clusters", num_clients=10,
                                  num_clusters=5, parts_per_cluster=4, test_fraction=0,
                                  scale=scale[1] if scale else None)
    sizes = [int(line.split()[1]) for line in described[table + 2:table + 12]]
    assert sizes == data.train.counts.tolist()
