"""The on-disk federated format: round trip, same history, and every damage named."""

import json
import re

import numpy as np
import pytest
import torch

import fedsparse as fs
import fedsparse.data.ondisk as ondisk
from fedsparse.data import DataFormatError
from fedsparse.data.ondisk import open_federated, read_client, write_federated


@pytest.fixture(scope="module")
def eager():
    return fs.data.fedprox_synthetic(num_clients=30, dim=6, num_classes=3, seed=4)


@pytest.fixture()
def written(eager, tmp_path):
    return write_federated(eager, tmp_path / "fed")


def _same_clients(a, b):
    assert torch.equal(a.counts, b.counts)
    for s in range(a.num_clients):
        for u, v in zip(a.client(s), b.client(s), strict=True):
            assert torch.equal(u, v)


def _records(h):
    return [{k: v for k, v in r.items() if k not in ("seconds", "elapsed")} for r in h.records]


def test_round_trip_gives_the_same_clients_and_history(eager, written):
    disk = open_federated(written)
    assert repr(disk) == repr(eager) and disk.layout == eager.layout
    assert torch.equal(disk.weights, eager.weights)
    ids = torch.tensor([29, 3, 4])
    _same_clients(disk.train.select(ids), eager.train.select(ids))
    _same_clients(disk.test.select(ids), eager.test.select(ids))
    algo = fs.algorithms.fed_avg(step_size=0.02, local_steps=2, batch_size=5)
    a = fs.simulate(algo, fs.problems.softmax(), eager, rounds=2, seed=2, clients_per_round=7)
    b = fs.simulate(algo, fs.problems.softmax(), disk, rounds=2, seed=2, clients_per_round=7)
    assert _records(a) == _records(b) and torch.equal(a.model, b.model)


def test_a_lazy_data_set_is_written_in_chunks(tmp_path):
    lazy = fs.data.shifted_gaussian(num_clients=40, samples_per_client=5, dim=12, sparsity=2,
                                    seed=3, lazy=True)
    path = write_federated(lazy, tmp_path / "sg", chunk_bytes=200)  # a few clients a chunk
    disk = open_federated(path)
    assert torch.equal(disk.ground_truth, lazy.ground_truth)
    assert torch.equal(disk.train.select(torch.arange(40)).X,
                       lazy.train.select(torch.arange(40)).X)


def test_a_client_that_does_not_exist(written):
    with pytest.raises(DataFormatError, match=r"fed.*client 30 does not exist"):
        read_client(written, 30)
    disk = open_federated(written)
    with pytest.raises(DataFormatError, match="client 31 does not exist"):
        disk.train.select(torch.tensor([2, 31]))


def test_a_truncated_file(written):
    f = written / "train.X.npy"
    f.write_bytes(f.read_bytes()[:-9])
    with pytest.raises(DataFormatError, match=r"train\.X\.npy.*truncated"):
        open_federated(written)


def test_a_corrupted_client_is_named_when_read(written):
    disk_before = open_federated(written)
    off = np.load(written / "train.offsets.npy")
    X = np.load(written / "train.X.npy", mmap_mode="r+")
    X[off[7]] += 1.0  # one value of client 7, same size
    X.flush()
    del X
    disk = open_federated(written)  # sizes agree: opening is cheap and passes
    disk.train.select(torch.tensor([6, 8]))  # other clients still read
    for d in (disk, disk_before):
        with pytest.raises(DataFormatError, match=r"train\.X\.npy.*client 7.*corrupted"):
            d.train.select(torch.tensor([7]))


def test_index_and_contents_disagree(written):
    off = np.load(written / "train.offsets.npy")
    off[5] += 1  # client 4 gains a row that belongs to client 5
    np.save(written / "train.offsets.npy", off)
    index = json.loads((written / "index.json").read_text())
    entry = index["files"]["train.offsets.npy"]
    with pytest.raises(DataFormatError, match=r"train\.offsets\.npy.*SHA-256"):
        open_federated(written)
    entry["sha256"] = ondisk._sha256(written / "train.offsets.npy")  # a consistent lie
    (written / "index.json").write_text(json.dumps(index))
    disk = open_federated(written)
    with pytest.raises(DataFormatError, match="client 4"):
        disk.train.select(torch.tensor([4]))
    index["num_clients"] = 31
    (written / "index.json").write_text(json.dumps(index))
    with pytest.raises(DataFormatError, match=r"train\.offsets\.npy.*31 clients"):
        open_federated(written)


def test_a_missing_or_broken_index(written, tmp_path):
    (written / "index.json").write_text("{not json")
    with pytest.raises(DataFormatError, match=r"index\.json.*not valid JSON"):
        open_federated(written)
    (written / "index.json").unlink()
    with pytest.raises(DataFormatError, match=r"index\.json: missing"):
        open_federated(written)
    with pytest.raises(DataFormatError, match="not a directory"):
        open_federated(tmp_path / "nothing")


def test_an_interrupted_write_leaves_nothing_that_reads_as_valid(eager, tmp_path, monkeypatch):
    calls = []

    def dies(*args, **kwargs):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(ondisk, "_sha256", dies)  # dies after the arrays are written
    with pytest.raises(KeyboardInterrupt):
        write_federated(eager, tmp_path / "fed")
    assert calls and not (tmp_path / "fed").exists()
    assert list(tmp_path.iterdir()) == []  # the partial directory is removed too
    monkeypatch.undo()
    path = write_federated(eager, tmp_path / "fed")
    # an interrupted overwrite keeps the old, complete data set
    monkeypatch.setattr(ondisk, "_sha256", dies)
    with pytest.raises(KeyboardInterrupt):
        write_federated(eager, path, overwrite=True)
    monkeypatch.undo()
    assert open_federated(path).num_clients == 30


def test_write_refuses_what_it_cannot_store(eager, written):
    with pytest.raises(fs.ConfigError, match="already exists"):
        write_federated(eager, written)
    with pytest.raises(fs.ConfigError, match="dtype"):
        write_federated(eager.to(torch.bfloat16), written.parent / "bf16")


def test_cli_writes_a_split_and_a_generated_data_set(tmp_path, capsys):
    from fedsparse.cli import main

    assert main(["data", "write", "digits", "--partition", "dirichlet", "--clients", "8",
                 "--seed", "1", "--out", str(tmp_path / "digits")]) == 0
    assert "wrote FederatedDataset(" in capsys.readouterr().out
    disk = open_federated(tmp_path / "digits")
    eager = fs.data.federated_real("digits", partition="dirichlet", num_clients=8, seed=1,
                                   test_fraction=0.2)
    assert repr(disk) == repr(eager)
    _same_clients(disk.train.select(torch.arange(8)), eager.train)
    assert main(["data", "write", "fedprox_synthetic", "--clients", "50", "--seed", "2",
                 "--out", str(tmp_path / "gen")]) == 0
    lazy = fs.data.fedprox_synthetic(num_clients=50, seed=2, lazy=True)
    assert torch.equal(open_federated(tmp_path / "gen").train.select([49]).y,
                       lazy.train.select([49]).y)


def test_a_nan_written_in_with_its_checksum_is_named_when_read(written):
    off = np.load(written / "train.offsets.npy")
    X = np.load(written / "train.X.npy", mmap_mode="r+")
    X[off[7]] = np.nan  # client 7, checksum recomputed: not a corruption the CRC sees
    X.flush()
    Y = np.load(written / "train.y.npy")
    crc = np.load(written / "train.crc32.npy")
    crc[7] = ondisk._crc(np.array(X[off[7]:off[8]]), Y[off[7]:off[8]])
    del X
    np.save(written / "train.crc32.npy", crc)
    index = json.loads((written / "index.json").read_text())
    index["files"]["train.crc32.npy"]["sha256"] = ondisk._sha256(written / "train.crc32.npy")
    (written / "index.json").write_text(json.dumps(index))
    disk = open_federated(written)
    disk.train.select(torch.tensor([6, 8]))
    with pytest.raises(DataFormatError, match=r"train\.X\.npy: client 7's rows \d+\.\.\d+ hold "
                                              "NaN or infinite values"):
        disk.train.select(torch.tensor([7]))


def test_a_written_folder_is_the_ondisk_data_kind_of_a_config(eager, written, tmp_path):
    """``data = {kind = "ondisk", path = DIR}`` trains on the folder as fs.simulate does on
    the data set it was written from, and ``--set`` switches a config's data to it."""
    from fedsparse.cli import main
    from fedsparse.experiments import run_experiment
    from fedsparse.experiments.config import load_config
    from fedsparse.history import History

    algo = {"kind": "fed_avg", "step_size": 0.02, "local_steps": 2, "batch_size": 5}
    config = {"runs": [{"label": "a", "rounds": 2, "seed": 2, "clients_per_round": 7,
                        "data": {"kind": "ondisk", "path": str(written)},
                        "problem": {"kind": "softmax"}, "algorithm": algo}]}
    run_experiment(config, tmp_path / "out", progress=False, log=lambda *a: None)
    run = History.load(tmp_path / "out" / "a")
    direct = fs.simulate(fs.algorithms.fed_avg(step_size=0.02, local_steps=2, batch_size=5),
                         fs.problems.softmax(), eager, rounds=2, seed=2, clients_per_round=7)
    assert [r["objective"] for r in run.records] == \
        pytest.approx([r["objective"] for r in direct.records], rel=1e-6)
    # a table of another kind replaces the config's (its old arguments would not apply)
    toml = tmp_path / "e.toml"
    toml.write_text('[defaults]\nrounds = 2\n[defaults.data]\nkind = "fedprox_synthetic"\n'
                    'num_clients = 4\nnum_classes = 3\ndim = 6\n[defaults.problem]\n'
                    'kind = "softmax"\n[defaults.algorithm]\nkind = "fed_avg"\n'
                    'step_size = 0.02\n[[runs]]\nlabel = "a"\n')
    assert main(["run", str(toml), "--out", str(tmp_path / "cli"), "--quiet", "--set",
                 f'data={{kind = "ondisk", path = "{written}"}}']) == 0
    saved = load_config(tmp_path / "cli" / "config.toml")["runs"][0]["data"]
    assert saved == {"kind": "ondisk", "path": str(written)}
    # trained on the folder's 30 clients, not the config's 4
    assert "clients=30, dim=6" in History.load(tmp_path / "cli" / "a").config["data"]


def _replace_small_file(folder, name, array):
    """Put ``array`` in ``name`` with its size and SHA-256 in the index, as an edit by
    hand (or another writer) would: only the reader's own checks can refuse it."""
    np.save(folder / name, array)
    index = json.loads((folder / "index.json").read_text())
    index["files"][name] = {"bytes": (folder / name).stat().st_size,
                            "sha256": ondisk._sha256(folder / name)}
    (folder / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize(("name", "array", "message"), [
    ("ground_truth.npy", np.full(6, np.nan, dtype=np.float32),
     r"ground_truth\.npy: float32 array of shape \(6,\) holding NaN"),
    ("ground_truth.npy", np.array(["a"] * 6), r"ground_truth\.npy: <U1 array"),
    ("weights.npy", np.array(["a"] * 30), r"weights\.npy: <U1 array.*30 finite float"),
    ("train.crc32.npy", np.zeros(30, dtype=np.float32),
     r"train\.crc32\.npy: float32 array.*30 unsigned CRC-32"),
])
def test_a_small_array_of_the_wrong_kind_is_named_when_opened(written, name, array, message):
    """A file with a valid checksum but values the writer never writes (a NaN model,
    strings, float checksums) is refused naming it, not read into NaN metrics or a
    NumPy/torch error."""
    _replace_small_file(written, name, array)
    with pytest.raises(DataFormatError, match=message):
        open_federated(written)


@pytest.mark.parametrize(("field", "value"), [
    ("feature_shape", [6.7]), ("feature_shape", ["6"]), ("feature_shape", [[6]]),
    ("num_clients", True), ("num_clients", 0), ("version", True),
])
def test_an_index_field_of_the_wrong_kind_is_named(written, field, value):
    """A hand-edited index is refused naming the field: ``[6.7]`` is not cut to 6, JSON's
    ``true`` is not read as 1."""
    index = json.loads((written / "index.json").read_text())
    index[field] = value
    (written / "index.json").write_text(json.dumps(index))
    with pytest.raises(DataFormatError, match=r"index\.json: (field '" + field + "'|version)"):
        open_federated(written)


@pytest.mark.parametrize("name", ["train.X.npy", "weights.npy", "index.json"])
def test_a_file_linked_from_outside_the_folder_is_refused_naming_both(written, tmp_path, name):
    """The folder holds the whole data set: a symbolic link out of it is refused, naming
    the link and where it points, though the file's size and checksums would pass; a
    link to another file in the folder, and a folder reached by a link, read as before."""
    import os
    import shutil

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(written / name, elsewhere / name)
    os.symlink(elsewhere / name, written / name)
    with pytest.raises(DataFormatError, match=re.escape(
            f"fed/{name}: a symbolic link to {elsewhere / name}, outside the data set's "
            f"folder {written.resolve()}; a data set reads only the files in its folder")):
        open_federated(written)
    (written / name).unlink()
    shutil.move(elsewhere / name, written / f"kept.{name}")
    os.symlink(f"kept.{name}", written / name)  # relative, within the folder
    os.symlink(written, tmp_path / "via-link")
    for path in (written, tmp_path / "via-link"):
        disk = open_federated(path)
        assert disk.num_clients == 30 and read_client(disk, 3)[0].shape[1] == 6


@pytest.mark.parametrize("name", ["train.X.npy", "index.json"])
def test_a_file_that_is_a_link_loop_is_refused_naming_it(written, name):
    """A link to itself (or a loop of links) is a DataFormatError naming it, not
    pathlib's RuntimeError from resolving where it points."""
    import os

    (written / name).unlink()
    os.symlink(name, written / name)
    with pytest.raises(DataFormatError, match=re.escape(
            f"fed/{name}: a symbolic link that loops back to itself (it leads to no file); a "
            "data set's files are files in its folder")):
        open_federated(written)
