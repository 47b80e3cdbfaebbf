"""validate_checkpoint: a damaged or mismatched checkpoint is refused, naming the file."""

import copy

import pytest
import torch

from fedsparse import ConfigError
from fedsparse.checkpoints import CHECKPOINT_KEYS, validate_checkpoint

PATH = "runs/x/fed-ht/checkpoint.pt"


def _ckpt(done: int = 3, P: int = 5) -> dict:
    return {"format": "fedsparse-checkpoint-1", "round": done,
            "state": {"model": torch.zeros(P, dtype=torch.float64)},
            "client_state": None,
            "records": [{"round": r, "objective": 1.0 / r} for r in range(1, done + 1)],
            "initial": {"round": 0, "objective": 2.0}, "fingerprint": {"seed": 0}}


def _refused(ckpt, *, model_size=5, rounds=10) -> str:
    with pytest.raises(ConfigError) as exc:
        validate_checkpoint(ckpt, path=PATH, model_size=model_size, rounds=rounds)
    assert PATH in str(exc.value)
    return str(exc.value)


def test_a_sound_checkpoint_passes():
    validate_checkpoint(_ckpt(), path=PATH, model_size=5, rounds=10)
    validate_checkpoint(_ckpt(), path=PATH, model_size=5, rounds=3)  # nothing left to run
    validate_checkpoint(_ckpt(done=0), path=PATH, model_size=5, rounds=1)
    ckpt = _ckpt()
    ckpt["client_state"] = {"residual": torch.zeros(4, 5)}
    validate_checkpoint(ckpt, path=PATH, model_size=5, rounds=10)


def test_fewer_rounds_than_the_checkpoint_holds_is_an_error():
    msg = _refused(_ckpt(done=8), rounds=5)
    assert "already holds 8 rounds" in msg and "asks for 5" in msg and "--rounds 8" in msg


@pytest.mark.parametrize("key", CHECKPOINT_KEYS)
def test_every_key_must_be_present(key):
    ckpt = _ckpt()
    del ckpt[key]
    assert key in _refused(ckpt)


@pytest.mark.parametrize("model,message", [
    (torch.zeros(4, dtype=torch.float64), "shape (4,)"),
    (torch.zeros(5, 1), "shape (5, 1)"),
    (torch.tensor([0.0, float("nan"), 0.0, float("inf"), 0.0]), "2 NaN or infinite"),
    (torch.zeros(5, dtype=torch.int64), "torch.int64"),
    ([0.0] * 5, "a list"),
])
def test_the_model_must_be_finite_and_of_the_right_shape(model, message):
    ckpt = _ckpt()
    ckpt["state"]["model"] = model
    assert message in _refused(ckpt)


def test_a_state_without_a_model_is_refused():
    ckpt = _ckpt()
    ckpt["state"] = {"dual": torch.zeros(5)}
    assert "no model" in _refused(ckpt)


@pytest.mark.parametrize("edit,message", [
    (lambda c: c["records"].pop(), "at round 3 but holds 2 round records"),
    (lambda c: c["records"][1].update(round=5), "record 2 says round 5"),
    (lambda c: c.update(records="x"), "not a list"),
    (lambda c: c.update(initial={"round": 1}), "round-0"),
    (lambda c: c.update(round=-1), "round=-1"),
    (lambda c: c.update(round=2.0), "round=2.0"),
    (lambda c: c.update(round=True), "round=True"),
    (lambda c: c.update(client_state=[1]), "client_state"),
    (lambda c: c.update(fingerprint="x"), "fingerprint"),
])
def test_records_must_match_the_round(edit, message):
    ckpt = copy.deepcopy(_ckpt())
    edit(ckpt)
    assert message in _refused(ckpt)


def test_not_a_dict():
    assert "not a dict" in _refused([1, 2, 3])


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_a_checkpoint_path_that_cannot_be_written_is_refused_before_training(tmp_path, where):
    import fedsparse as fs

    (tmp_path / "f").write_text("")
    path = tmp_path if where == "a directory" else tmp_path / "f" / "ckpt.pt"
    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=8, sparsity=2,
                                    seed=0)
    with pytest.raises(ConfigError, match="checkpoint="):
        fs.simulate(fs.algorithms.fed_iter_ht(sparsity=2, step_size=0.01),
                    fs.problems.least_squares(), data, rounds=2, checkpoint=path)
