"""Checkpoints: a damaged, edited or mismatched checkpoint is refused, naming the file
and the entry; a sound one resumes to the uninterrupted history.

The hostile battery builds real checkpoints (FedMac's personal models, similarity
compensation's distance record, FedSpa's masks), damages one entry at a time or the
file's bytes, and resumes through :func:`fedsparse.simulate` as a user would.
"""

from __future__ import annotations

import copy
import json
import signal
import sys
import zipfile

import numpy as np
import pytest
import torch

import fedsparse as fs
from fedsparse import ConfigError
from fedsparse._signals import sigterm_raises
from fedsparse.checkpoints import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_KEYS,
    RecordLines,
    read_checkpoint,
    save_checkpoint,
    validate_checkpoint,
)

PATH = "runs/x/fed-ht/checkpoint.pt"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------ validate_checkpoint


def _ckpt(done: int = 3, P: int = 5) -> dict:
    return {"format": CHECKPOINT_FORMAT, "round": done,
            "state": {"model": torch.zeros(P, dtype=torch.float64), "step_size": 0.1},
            "client_state": None,
            "records": [{"round": r, "objective": 1.0 / r, "delivered_clients": [0, 1]}
                        for r in range(1, done + 1)],
            "initial": {"round": 0, "objective": 2.0}, "fingerprint": {"seed": 0}}


FRESH = {"model": torch.ones(5, dtype=torch.float64), "step_size": 0.1}


def _refused(ckpt, *, state=None, client_state=None, rounds=10) -> str:
    with pytest.raises(ConfigError) as exc:
        validate_checkpoint(ckpt, path=PATH, rounds=rounds,
                            state=FRESH if state is None else state, client_state=client_state)
    assert PATH in str(exc.value)
    return str(exc.value)


def test_a_sound_checkpoint_passes():
    validate_checkpoint(_ckpt(), path=PATH, rounds=10, state=FRESH, client_state=None)
    validate_checkpoint(_ckpt(), path=PATH, rounds=3, state=FRESH, client_state=None)
    validate_checkpoint(_ckpt(done=0), path=PATH, rounds=1, state=FRESH, client_state=None)
    ckpt = _ckpt()
    ckpt["client_state"] = {"residual": torch.zeros(4, 5)}
    validate_checkpoint(ckpt, path=PATH, rounds=10, state=FRESH,
                        client_state={"residual": torch.ones(4, 5)})


def test_fewer_rounds_than_the_checkpoint_holds_is_an_error():
    msg = _refused(_ckpt(done=8), rounds=5)
    assert "already holds 8 rounds" in msg and "asks for 5" in msg and "--rounds 8" in msg


@pytest.mark.parametrize("key", CHECKPOINT_KEYS)
def test_every_key_must_be_present(key):
    ckpt = _ckpt()
    del ckpt[key]
    assert key in _refused(ckpt)


@pytest.mark.parametrize("model,message", [
    (torch.zeros(4, dtype=torch.float64), "state['model'] has shape (4,), but this run's has "
                                          "shape (5,)"),
    (torch.zeros(5, 1, dtype=torch.float64), "shape (5, 1)"),
    (torch.tensor([0.0, float("nan"), 0.0, float("inf"), 0.0], dtype=torch.float64),
     "state['model'] holds 2 NaN or infinite entries"),
    (torch.zeros(5, dtype=torch.int64), "dtype torch.int64, but this run's has dtype "
                                        "torch.float64"),
    (torch.zeros(5, dtype=torch.float32), "dtype torch.float32"),
    (torch.zeros(5, dtype=torch.float64).to_sparse(), "sparse"),
    ([0.0] * 5, "state['model'] is a list, but this run's is a tensor"),
])
def test_the_model_must_be_finite_and_of_the_right_shape(model, message):
    ckpt = _ckpt()
    ckpt["state"]["model"] = model
    assert message in _refused(ckpt)


def test_a_finite_state_whose_sum_overflows_is_accepted():
    # the finiteness check sums first; a sum that overflows must not refuse finite data
    big = torch.full((5,), 1e308, dtype=torch.float64)
    ckpt = _ckpt()
    ckpt["state"]["model"] = big
    out = validate_checkpoint(ckpt, path=PATH, rounds=10, state=FRESH, client_state=None)
    assert torch.equal(out["state"]["model"], big)
    big[2] = float("nan")
    assert "state['model'] holds 1 NaN" in _refused(ckpt)


def test_a_state_without_a_model_is_refused():
    ckpt = _ckpt()
    ckpt["state"] = {"step_size": 0.1}
    assert "state has no entry 'model'" in _refused(ckpt)


@pytest.mark.parametrize("edit,message", [
    (lambda c: c["records"].pop(), "at round 3 but holds 2 round records"),
    (lambda c: c["records"][1].update(round=5), "record 2 says round 5"),
    (lambda c: c.update(records=5), "not a list"),
    (lambda c: c.update(records='{"round": 1}\n{"round": 2\n{"round": 3}\n'),
     "record line 2 is not JSON"),
    (lambda c: c.update(records='{"round": 1}\n{"round": 2}\n'),
     "at round 3 but holds 2 round records"),
    (lambda c: c.update(initial={"round": 1}), "round-0"),
    (lambda c: c.update(round=-1), "round=-1"),
    (lambda c: c.update(round=2.0), "round=2.0"),
    (lambda c: c.update(round=True), "round=True"),
    (lambda c: c.update(client_state=[1]), "client_state"),
    (lambda c: c.update(fingerprint="x"), "fingerprint"),
    (lambda c: c["records"][0].update(objective=torch.zeros(3)), "records[0]['objective']"),
    (lambda c: c["records"][2].update(delivered_clients=[0, object]),
     "records[2]['delivered_clients']"),
    (lambda c: c["initial"].update(extra={1: 2}), "initial['extra']"),
    # a checksum recomputed after an edit: the values must still be a round's
    (lambda c: c["records"][0].update(objective="hello"),
     "record 1: objective='hello' is invalid: must be a number or null"),
    (lambda c: c["records"][1].update(bytes_up=-5),
     "record 2: bytes_up=-5 is invalid: must not be negative"),
    (lambda c: c["initial"].update(density=1.5),
     "the initial record: density=1.5 is invalid: must be a fraction between 0 and 1"),
    (lambda c: c["records"][2].update(delivered=-2 ** 300),
     "record 3: delivered=<an int of 301 bits> is invalid: must not be negative"),
])
def test_records_must_match_the_round(edit, message):
    ckpt = copy.deepcopy(_ckpt())
    edit(ckpt)
    assert message in _refused(ckpt)


def test_a_diverged_round_and_a_callback_s_own_fields_pass():
    ckpt = copy.deepcopy(_ckpt())
    ckpt["records"][2].update(objective=float("nan"), accuracy=None, density=float("nan"),
                              my_note="lr warm-up", my_score=-3)
    validate_checkpoint(ckpt, path=PATH, rounds=10, state=FRESH, client_state=None)


def test_not_a_dict():
    assert "not a dict" in _refused([1, 2, 3])


def test_records_that_share_one_list_cannot_expand_beyond_the_file():
    # 10^5 records naming one list of 10^4 entries: a few hundred KB of pickle, 10^9
    # entries once written out: refused, and fast (each shared list is counted once
    # per reference, up to a budget of the file's size)
    ckpt = _ckpt(done=100_000)
    shared = list(range(10_000))
    for r in ckpt["records"]:
        r["delivered_clients"] = shared
    with pytest.raises(ConfigError, match="records.*more entries than"):
        validate_checkpoint(ckpt, path=PATH, rounds=100_000, state=FRESH, client_state=None,
                            file_size=1_000_000)


# -------------------------------------------------- hostile checkpoints, resumed


def _cls_data():
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(12, 6, generator=gen) for _ in range(5)]
    ys = [torch.randint(0, 3, (12,), generator=gen).float() for _ in range(5)]
    return fs.data.from_arrays(xs, ys)


def _fedmac():
    return fs.algorithms.fedmac(lam=1.0, step_size=0.05, personal_step_size=0.05,
                                local_steps=2, batch_size=4)


def _compensated():
    return fs.algorithms.similarity_compensation(fs.algorithms.fed_avg(step_size=0.05,
                                                                       local_steps=2))


def _fedspa():
    return fs.algorithms.safari(density=0.5, pruner="fedspa", step_size=0.01,
                                local_steps=1, batch_size=4, compensation=False)


RUNS = {
    "fedmac": (_fedmac, lambda: fs.problems.softmax(3), None),
    "compensated": (_compensated, lambda: fs.problems.softmax(3),
                    lambda: fs.channels.BernoulliChannel(0.6)),
    "fedspa": (_fedspa, lambda: fs.problems.neural(fs.models.mlp(6, (4,), 3)), None),
}


class _Stop(Exception):
    pass


def _stop_at_round_3(record, state):
    if record["round"] == 3:  # before round 3 is saved: the checkpoint holds round 2
        raise _Stop


def _simulate(kind: str, path, *, rounds: int, resume: bool = False, callback=None):
    algo, problem, channel = RUNS[kind]
    return fs.simulate(algo(), problem(), _cls_data(), rounds=rounds, seed=1,
                       channel=None if channel is None else channel(), checkpoint=path,
                       checkpoint_every=1, resume=resume, callback=callback)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The checkpoint a 3-round run of each kind leaves when it is stopped after round 2,
    and the uninterrupted 3-round history it must resume to (FedSpa's schedule depends on
    the run's length, so the checkpoint must come from a 3-round run)."""
    root = tmp_path_factory.mktemp("ckpt")
    out = {}
    for kind in RUNS:
        with pytest.raises(_Stop):
            _simulate(kind, root / f"{kind}.pt", rounds=3, callback=_stop_at_round_3)
        full = _simulate(kind, None, rounds=3)
        out[kind] = ((root / f"{kind}.pt").read_bytes(), full)
    return out


def _no_time(records):
    return [{k: v for k, v in r.items() if k not in ("seconds", "elapsed")} for r in records]


@pytest.mark.parametrize("kind", RUNS)
def test_a_sound_checkpoint_resumes_to_the_uninterrupted_run(saved, tmp_path, kind):
    raw, full = saved[kind]
    path = tmp_path / "c.pt"
    path.write_bytes(raw)
    resumed = _simulate(kind, path, rounds=3, resume=True)
    assert _no_time(resumed.records) == _no_time(full.records)
    assert torch.equal(resumed.model, full.model)
    if full.personal_models is not None:
        assert torch.equal(resumed.personal_models, full.personal_models)


def test_a_resume_with_probabilities_the_printout_rounds_alike_is_refused(tmp_path):
    def run(probabilities, rounds, resume=False):
        return fs.simulate(fs.algorithms.fed_avg(step_size=0.05, local_steps=1),
                           fs.problems.softmax(), _cls_data(), rounds=rounds, seed=1,
                           channel=fs.channels.BernoulliChannel(probabilities),
                           checkpoint=tmp_path / "c.pt", checkpoint_every=1, resume=resume)

    run([0.18, 0.6, 0.6, 0.6, 0.6], rounds=2)
    # torch prints both as 0.1800: the channel's repr alone cannot tell them apart
    with pytest.raises(ConfigError, match="belongs to another run; differences .*"
                       "channel_probabilities"):
        run([0.18001, 0.6, 0.6, 0.6, 0.6], rounds=3, resume=True)
    # a checkpoint written before the digest was kept resumes as it did
    ckpt = dict(read_checkpoint(tmp_path / "c.pt"))
    ckpt["fingerprint"] = {k: v for k, v in ckpt["fingerprint"].items()
                           if k != "channel_probabilities"}
    save_checkpoint(tmp_path / "c.pt", ckpt)
    assert len(run([0.18, 0.6, 0.6, 0.6, 0.6], rounds=3, resume=True).records) == 3


@pytest.mark.parametrize("changed", [{"eval_every": 2}, {"max_update_norm": 10.0},
                                     {"max_update_ratio": 3.0}])
def test_a_resume_with_other_round_rules_is_refused(tmp_path, changed):
    # neither is in the run's record, and either would make a history that no
    # uninterrupted run gives (two evaluation periods, two screening rules)
    def run(rounds, resume=False, **rules):
        return fs.simulate(fs.algorithms.fed_avg(step_size=0.05, local_steps=1),
                           fs.problems.softmax(), _cls_data(), rounds=rounds, seed=1,
                           checkpoint=tmp_path / "c.pt", resume=resume, **rules)

    run(2)
    with pytest.raises(ConfigError, match=r"another run.*round_rules.*"
                       + next(iter(changed))):
        run(3, resume=True, **changed)
    # a checkpoint written before the rules were kept resumes as it did
    ckpt = dict(read_checkpoint(tmp_path / "c.pt"))
    ckpt["fingerprint"] = {k: v for k, v in ckpt["fingerprint"].items() if k != "round_rules"}
    save_checkpoint(tmp_path / "c.pt", ckpt)
    assert len(run(3, resume=True).records) == 3


def test_records_are_saved_as_json_lines_and_format_3_lists_still_resume(saved, tmp_path):
    raw, full = saved["fedmac"]
    src = tmp_path / "src.pt"
    src.write_bytes(raw)
    payload = read_checkpoint(src)
    assert payload["format"] == CHECKPOINT_FORMAT
    lines = payload["records"].splitlines()
    assert [json.loads(line)["round"] for line in lines] == [1, 2]
    # a file of the previous format: the same records as a list of dicts
    path = _edited(raw, tmp_path, lambda p: (_record_list(p),
                                             p.update(format="fedsparse-checkpoint-3")))
    resumed = _simulate("fedmac", path, rounds=3, resume=True)
    assert _no_time(resumed.records) == _no_time(full.records)


def test_record_lines_encode_what_was_added_since_the_last_save():
    lines = RecordLines()
    records = [{"round": 1, "objective": 0.5}]
    assert lines.text(records) == '{"round": 1, "objective": 0.5}\n'
    records.append({"round": 2, "objective": np.float64(0.25), "nnz": np.int64(3),
                    "density": torch.tensor(0.125, dtype=torch.float64)})
    assert lines.text(records) == ('{"round": 1, "objective": 0.5}\n{"round": 2, '
                                   '"objective": 0.25, "nnz": 3, "density": 0.125}\n')
    assert lines.text(records[:1]) == '{"round": 1, "objective": 0.5}\n'  # encoded afresh
    with pytest.raises(ConfigError, match=r"round record 3 cannot be saved.*ndarray"):
        lines.text(records + [{"round": 3, "extra": np.zeros(2)}])


def test_a_callback_that_adds_numpy_numbers_resumes_with_python_numbers(tmp_path):
    def add(record, state):
        record["norm"] = np.float64(record["round"]) / 4

    path = tmp_path / "c.pt"
    first = _simulate("fedmac", path, rounds=2, callback=add)
    resumed = _simulate("fedmac", path, rounds=3, resume=True, callback=add)
    assert [r["norm"] for r in resumed.records] == [0.25, 0.5, 0.75]
    assert type(resumed.records[0]["norm"]) is float and len(first.records) == 2


def _edited(raw: bytes, tmp_path, edit):
    """The checkpoint ``raw`` with ``edit(payload)`` applied, saved as fedsparse saves
    (so only the content, not the file's integrity, is wrong)."""
    src = tmp_path / "src.pt"
    src.write_bytes(raw)
    payload = read_checkpoint(src)
    edit(payload)
    path = tmp_path / "c.pt"
    save_checkpoint(path, payload)
    return path


def _set(section: str, key: str, value):
    return lambda p: p[section].__setitem__(key, value(p[section][key]))


def _drop(section: str, key: str):
    return lambda p: p[section].pop(key)


def _nan_at(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[1] = float("nan")
    return t


HOSTILE_STATE = [
    # FedMac: personal models and the server's counters
    ("fedmac", lambda p: p.update(client_state=None),
     "client_state is None, but this run keeps per-client state"),
    ("fedmac", _drop("client_state", "trained"), "client_state has no entry 'trained'"),
    ("fedmac", lambda p: p["client_state"].update(momentum=torch.zeros(5)),
     "client_state has an entry 'momentum' that this run does not have"),
    ("fedmac", _set("client_state", "personal", lambda v: v[:, :-1]),
     "client_state['personal'] has shape (5, 17), but this run's has shape (5, 18)"),
    ("fedmac", _set("client_state", "personal", lambda v: v[:-1]),
     "client_state['personal'] has shape (4, 18)"),
    ("fedmac", _set("client_state", "personal", lambda v: v.double()),
     "client_state['personal'] has dtype torch.float64, but this run's has dtype "
     "torch.float32"),
    ("fedmac", _set("client_state", "trained", lambda v: v.float()),
     "client_state['trained'] has dtype torch.float32"),
    ("fedmac", _set("client_state", "personal", _nan_at),
     "client_state['personal'] holds 1 NaN or infinite entries"),
    ("fedmac", _set("client_state", "personal", lambda v: v.fill_(float("inf"))),
     "client_state['personal'] holds 90 NaN or infinite entries"),
    ("fedmac", _set("client_state", "personal", lambda v: v.tolist()),
     "client_state['personal'] is a list, but this run's is a tensor"),
    ("fedmac", _set("state", "model", _nan_at), "state['model'] holds 1 NaN"),
    ("fedmac", _drop("state", "fedmac_bits"), "state has no entry 'fedmac_bits'"),
    ("fedmac", _set("state", "fedmac_bits", lambda v: float("nan")),
     "state['fedmac_bits'] is nan"),
    ("fedmac", _set("state", "averaged", lambda v: "3"),
     "state['averaged'] is a str, but this run's is an int"),
    ("fedmac", _set("state", "averaged", lambda v: 2.5), "state['averaged'] is a float"),
    ("fedmac", _set("state", "averaged", lambda v: True), "state['averaged'] is a bool"),
    ("fedmac", _set("state", "averaged", lambda v: -4), "state['averaged'] is -4"),
    ("fedmac", lambda p: p.update(state=[p["state"]]), "state is a list, but this run's is a dict"),
    # similarity compensation: the sparse distance record (measured pairs, any number)
    ("compensated", _set("state", "similarity", lambda v: {**v, "pairs": v["pairs"][None]}),
     "state['similarity']['pairs'] has shape (1, 10), but this run's is 1-D (of any "
     "length)"),
    ("compensated", _set("state", "similarity",
                         lambda v: {**v, "distances": v["distances"].float()}),
     "state['similarity']['distances'] has dtype torch.float32"),
    ("compensated", _set("state", "similarity",
                         lambda v: {**v, "distances": _nan_at(v["distances"])}),
     "state['similarity']['distances'] holds 1 NaN"),
    ("compensated", _set("state", "similarity",
                         lambda v: {**v, "distances": -1 / (v["distances"] * 0)}),
     "state['similarity']['distances'] holds"),
    ("compensated", _set("state", "similarity", lambda v: torch.zeros(5, 5)),
     "state['similarity'] is a tensor, but this run's is a dict"),
    ("compensated", _drop("state", "similarity"), "state has no entry 'similarity'"),
    ("compensated", _set("state", "compensated", lambda v: None),
     "state['compensated'] is a NoneType"),
    # FedSpa: the clients' masks
    ("fedspa", _set("client_state", "mask", lambda v: v.float()),
     "client_state['mask'] has dtype torch.float32, but this run's has dtype torch.bool"),
    ("fedspa", _set("client_state", "mask", lambda v: v[:, :10]),
     "client_state['mask'] has shape (5, 10)"),
    ("fedspa", lambda p: p.update(client_state=None), "client_state is None"),
    ("fedspa", lambda p: p.update(client_state={}), "client_state has no entry 'mask'"),
]


@pytest.mark.parametrize("kind,edit,message", HOSTILE_STATE,
                         ids=[f"{k}-{m[:40]}" for k, _, m in HOSTILE_STATE])
def test_hostile_state_is_refused_naming_the_file_and_the_entry(saved, tmp_path, kind, edit,
                                                                message):
    path = _edited(saved[kind][0], tmp_path, edit)
    with pytest.raises(ConfigError) as exc:
        _simulate(kind, path, rounds=3, resume=True)
    assert str(path) in str(exc.value)
    assert message in str(exc.value)


def test_a_record_of_another_length_is_resumed(saved, tmp_path):
    # the sparse distance record grows with the pairs measured: a checkpoint holding
    # none (as if nothing had arrived together yet) is sound
    def all_unmeasured(p):
        p["state"]["similarity"] = {k: v[:0] for k, v in p["state"]["similarity"].items()}

    path = _edited(saved["compensated"][0], tmp_path, all_unmeasured)
    _simulate("compensated", path, rounds=3, resume=True)


# ------------------------------------------------------------ the file's bytes


def _personal_offset(raw: bytes, tmp_path) -> int:
    src = tmp_path / "find.pt"
    src.write_bytes(raw)
    personal = read_checkpoint(src)["client_state"]["personal"]
    at = raw.find(personal.numpy().tobytes())
    assert at > 0
    return at


def _flip(raw: bytes, at: int, n: int) -> bytes:
    data = bytearray(raw)
    for i in range(at, at + n):
        data[i] ^= 0xFF
    return bytes(data)


def _deflated(raw: bytes, tmp_path) -> bytes:
    """The same archive with its entries deflate-compressed and a fresh checksum (a
    compressed entry could declare any size: fedsparse stores its entries)."""
    import hashlib
    import io

    from fedsparse.checkpoints import _trailer

    body = raw[:raw.rfind(b"\n#fedsparse")]
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(body)) as src, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    body = out.getvalue()
    return body + _trailer(hashlib.sha256(body).hexdigest())


FILE_DAMAGE = [
    ("64 flipped bytes in the personal models",
     lambda raw, tmp: _flip(raw, _personal_offset(raw, tmp), 64), "checksum"),
    ("one flipped byte in the header", lambda raw, tmp: _flip(raw, 40, 1), "checksum"),
    ("appended garbage", lambda raw, tmp: raw + b"garbage" * 10, "bytes after its checksum"),
    # ends with a checksum line, of the second copy only
    ("a second copy appended", lambda raw, tmp: raw + raw, "checksum"),
    ("truncated to half", lambda raw, tmp: raw[:len(raw) // 2], "truncated"),
    ("truncated by one byte", lambda raw, tmp: raw[:-1], "truncated"),
    ("empty", lambda raw, tmp: b"", "is empty"),
    ("without its checksum", lambda raw, tmp: raw[:raw.rfind(b"\n#fedsparse")], "checksum"),
    ("random bytes", lambda raw, tmp: bytes(range(256)) * 8, "checksum"),
    ("deflated entries", _deflated, "compressed"),
]


@pytest.mark.parametrize("damage,message", [(d, m) for _, d, m in FILE_DAMAGE],
                         ids=[name for name, _, _ in FILE_DAMAGE])
def test_damaged_bytes_are_refused_naming_the_file(saved, tmp_path, damage, message):
    raw = saved["fedmac"][0]
    path = tmp_path / "c.pt"
    path.write_bytes(damage(raw, tmp_path))
    with pytest.raises(ConfigError) as exc:
        _simulate("fedmac", path, rounds=3, resume=True)
    assert str(path) in str(exc.value)
    assert message in str(exc.value)


def test_a_checkpoint_cannot_run_code(saved, tmp_path):
    class Payload:
        def __reduce__(self):
            return (exec, ("open('pwned', 'w').close()",))

    import hashlib
    import io

    from fedsparse.checkpoints import _trailer

    buf = io.BytesIO()
    torch.save({"format": "fedsparse-checkpoint-2", "x": Payload()}, buf)
    body = buf.getvalue()
    path = tmp_path / "c.pt"
    path.write_bytes(body + _trailer(hashlib.sha256(body).hexdigest()))
    with pytest.raises(ConfigError, match="could not be read"):
        read_checkpoint(path)
    assert not (tmp_path / "pwned").exists()


def test_a_memo_shared_tuple_key_is_refused_before_unpickling(saved, tmp_path):
    """A tuple nested 7 deep, each level repeating one tuple, as a dict key: a few KB
    that torch's unpickler would hash 16^7 times (about a minute). Refused by reading
    the opcodes first, even with a matching checksum."""
    import hashlib
    import io
    import pickle

    from fedsparse.checkpoints import _trailer

    value = (1,) * 16
    for _ in range(7):
        value = (value,) * 16
    pkl = b"\x80\x02}(" + pickle.dumps(value, protocol=2)[2:-1] + b"K\x00u."
    raw = saved["fedmac"][0]
    body = raw[:raw.rfind(b"\n#fedsparse")]
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(body)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, pkl if info.filename.endswith("data.pkl") else src.read(info))
    body = out.getvalue()
    path = tmp_path / "c.pt"
    path.write_bytes(body + _trailer(hashlib.sha256(body).hexdigest()))
    with pytest.raises(ConfigError, match="uses a tuple as a dict key"):
        read_checkpoint(path)


def _shared_list(levels: int, width: int = 16) -> list:
    value = [1] * width
    for _ in range(levels):
        value = [value] * width
    return value


def _record_list(payload: dict) -> list:
    """A saved checkpoint's records (JSON lines) as a list, put back in their place as
    earlier formats held them, to be edited."""
    payload["records"] = [json.loads(line) for line in payload["records"].splitlines()]
    return payload["records"]


@pytest.mark.parametrize("edit,message", [
    (lambda p: p.update(fingerprint={**p["fingerprint"], "seed": _shared_list(7)}),
     "belongs to another run; differences (saved, now): {seed: (<list>, 1)}"),
    (lambda p: p.update(format=_shared_list(7)), "format <list>"),
    (lambda p: p.update(round=_shared_list(7)), "round=<list>"),
    (lambda p: _record_list(p)[0].update(round=_shared_list(7)), "record 1 says round <list>"),
    (lambda p: p.update(round=2**300), "at round <an int of 301 bits> but holds 2 round"),
])
def test_messages_never_print_a_memo_shared_structure(saved, tmp_path, edit, message):
    # 16^8 entries in a few KB: printed whole, the message would never end
    path = _edited(saved["fedmac"][0], tmp_path, edit)
    with pytest.raises(ConfigError) as exc:
        _simulate("fedmac", path, rounds=3, resume=True)
    assert str(path) in str(exc.value) and message in str(exc.value)


# ----------------------------------------------------------------------- writing


def _checkpoint_saved_by(save, saved, tmp_path, monkeypatch):
    """The FedMac checkpoint copied to ``tmp_path/c.pt``: (path, its bytes, its payload),
    with ``torch.save`` replaced by ``save(real_save, obj, f)``."""
    raw, _ = saved["fedmac"]
    path = tmp_path / "c.pt"
    path.write_bytes(raw)
    real_save = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f, *_, **__: save(real_save, obj, f))
    return path, raw, read_checkpoint(path)


def test_an_interrupted_save_keeps_the_previous_checkpoint(saved, tmp_path, monkeypatch):
    def save_half_then_die(real_save, obj, f):
        real_save(obj, f)
        f.truncate(f.tell() // 2)
        raise KeyboardInterrupt

    path, raw, payload = _checkpoint_saved_by(save_half_then_die, saved, tmp_path,
                                              monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {**payload, "round": 3})
    monkeypatch.undo()
    assert path.read_bytes() == raw
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left
    assert read_checkpoint(path)["round"] == 2


class _Stopped(Exception):
    pass


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signum, stops", [(signal.SIGINT, KeyboardInterrupt),
                                           (signal.SIGTERM, _Stopped)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_during_a_save_acts_once_the_checkpoint_is_written(
        saved, tmp_path, monkeypatch, signum, stops):
    # Ctrl-C inside torch.save once left its archive writer failing on exit, and that
    # error, not the interruption, reached the command (exit 1 and a traceback)
    def signalled_save(real_save, obj, f):
        signal.raise_signal(signum)
        real_save(obj, f)

    path, _, payload = _checkpoint_saved_by(signalled_save, saved, tmp_path, monkeypatch)
    # Python's own Ctrl-C handler, whatever an earlier test's library left in place
    assert signum not in signal.pthread_sigmask(signal.SIG_BLOCK, []), "signal blocked"
    previous_sigint = signal.signal(signal.SIGINT, signal.default_int_handler)
    with sigterm_raises(lambda _: _Stopped()):
        before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        with pytest.raises(stops):
            save_checkpoint(path, {**payload, "round": 3})
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    signal.signal(signal.SIGINT, previous_sigint)
    monkeypatch.undo()
    assert read_checkpoint(path)["round"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_a_checkpoint_is_readable_without_fedsparse(saved, tmp_path):
    # the checksum trails the archive, so torch.load alone still reads it
    path = tmp_path / "c.pt"
    path.write_bytes(saved["fedmac"][0])
    assert torch.load(path, weights_only=True)["round"] == 2


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_a_checkpoint_path_that_cannot_be_written_is_refused_before_training(tmp_path, where):
    (tmp_path / "f").write_text("")
    path = tmp_path if where == "a directory" else tmp_path / "f" / "ckpt.pt"
    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=8, sparsity=2,
                                    seed=0)
    with pytest.raises(ConfigError, match="checkpoint="):
        fs.simulate(fs.algorithms.fed_iter_ht(sparsity=2, step_size=0.01),
                    fs.problems.least_squares(), data, rounds=2, checkpoint=path)


def test_an_earlier_runs_checkpoint_is_not_overwritten_without_resume(tmp_path):
    data = fs.data.shifted_gaussian(num_clients=3, samples_per_client=10, dim=8, sparsity=2,
                                    seed=0)
    path = tmp_path / "ckpt.pt"

    def run(rounds, **kw):
        return fs.simulate(fs.algorithms.fed_iter_ht(sparsity=2, step_size=0.01),
                           fs.problems.least_squares(), data, rounds=rounds, checkpoint=path,
                           progress=False, **kw)

    run(5)
    saved = path.read_bytes()
    with pytest.raises(ConfigError, match=r"checkpoint=.*already holds a checkpoint; "
                                          r"resume=True continues"):
        run(2)
    assert path.read_bytes() == saved
    assert len(run(7, resume=True).records) == 7


def test_the_cli_names_a_damaged_checkpoint_without_a_traceback(tmp_path, capsys):
    from fedsparse.cli import main

    config = tmp_path / "tiny.toml"
    config.write_text("""
[defaults]
rounds = 2
problem = { kind = "softmax", num_classes = 3 }
[defaults.data]
kind = "fedprox_synthetic"
num_clients = 4
dim = 6
num_classes = 3
[[runs]]
label = "FedMac"
[runs.algorithm]
kind = "fedmac"
lam = 1.0
step_size = 0.05
personal_step_size = 0.05
local_steps = 2
batch_size = 4
""")
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out), "--quiet"]) == 0
    ckpt = out / "fedmac" / "checkpoint.pt"
    raw = ckpt.read_bytes()
    ckpt.write_bytes(_flip(raw, _personal_offset(raw, tmp_path), 64))
    capsys.readouterr()
    assert main(["run", str(config), "--out", str(out), "--quiet", "--resume", "--rounds",
                 "3"]) == 2
    err = capsys.readouterr().err
    # The output folder's manifest sees the changed file before the checksum does; either
    # way the file is named and nothing runs.
    assert "Traceback" not in err
    assert (str(ckpt) in err and "checksum" in err) or \
        ("fedmac/checkpoint.pt (changed since fedsparse wrote it)" in err)


# ------------------------------------------------------------ earlier formats


def _as_format_2(path, edit_state=None) -> None:
    """Rewrite the checkpoint at ``path`` as format 2 would have held it."""
    ckpt = read_checkpoint(path)
    ckpt["format"] = "fedsparse-checkpoint-2"
    if edit_state is not None:
        edit_state(ckpt["state"])
    save_checkpoint(path, ckpt)


def _two_then_four(algorithm, tmp_path, edit_state=None):
    data = fs.data.fedprox_synthetic(num_clients=4, dim=6, num_classes=3, seed=0,
                                     dtype=torch.float64)
    kw = dict(rounds=4, seed=0, checkpoint=tmp_path / "run.pt")
    problem = fs.problems.softmax(num_classes=3)
    fs.simulate(algorithm(), problem, data, **{**kw, "rounds": 2})
    _as_format_2(tmp_path / "run.pt", edit_state)
    whole = fs.simulate(algorithm(), problem, data, rounds=4, seed=0)
    return lambda: fs.simulate(algorithm(), problem, data, **kw, resume=True), whole


def test_a_format_2_checkpoint_of_an_unchanged_state_layout_resumes(tmp_path):
    resume, whole = _two_then_four(
        lambda: fs.algorithms.fed_avg(step_size=0.1, local_steps=2), tmp_path)
    assert torch.equal(resume().model, whole.model)


def test_a_format_2_checkpoint_of_a_changed_state_layout_says_it_is_from_an_earlier_version(
        tmp_path):
    def fedmac():
        return fs.algorithms.fedmac(lam=0.5, step_size=0.05, personal_step_size=0.05,
                                    local_steps=2, batch_size=4)

    # format 2 kept FedMac's seed in its server state
    resume, _ = _two_then_four(fedmac, tmp_path, lambda state: state.update(seed=0))
    with pytest.raises(ConfigError, match="earlier version of fedsparse .*entry 'seed'.*"
                                          "start the run afresh"):
        resume()
