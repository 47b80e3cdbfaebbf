"""The number of seeds each Python experiment declares it runs unless told is the number
it runs: ``--resume`` equates a run started without ``--seeds`` with ``--seeds`` that
number, so a wrong declaration would mix or refuse runs."""

from __future__ import annotations

import numpy as np
import pytest

from fedsparse.experiments import fedgradmp, fedmac, fedmac_table1, safari, safari_paper, scale
from fedsparse.experiments.registry import python_experiments

#: Their files take another layout with ``--seeds`` (one folder per replicate), so a run
#: without it continues only without it.
WITHOUT_DEFAULT = {"fig6-mnist5k", "fig6-fashion-mnist", "fig6-libsvm"}


class Seen(Exception):
    """Raised by a patched step with the number of seeds the experiment passed on."""


def _raise_seeds(seeds_of):
    def patched(*args, **kwargs):
        raise Seen(seeds_of(args, kwargs))
    return patched


class _History:
    """What scale-million reads of a run's history."""
    records = [dict(objective=0.0, objective_se=0.0, test_accuracy=0.0, test_accuracy_se=0.0,
                    eval_clients=1, seconds=0.0)]

    def save(self, path, overwrite=False):
        pass


def _seeds_run(name: str, quick: bool, tmp_path, monkeypatch) -> int:
    """How many seeds experiment ``name`` runs without ``seeds``, its costly step patched."""
    fn = python_experiments()[name].fn
    if name.startswith("safari-"):
        module = safari_paper if name.startswith("safari-paper") else safari
        monkeypatch.setattr(module, "run_safari", _raise_seeds(lambda a, k: a[2].seeds))
    elif name.startswith("fedmac-"):
        module = fedmac_table1 if name.startswith("fedmac-table1") else fedmac
        monkeypatch.setattr(module, "run_config", _raise_seeds(lambda a, k: k["seeds"]))
    elif name == "scale-million":
        monkeypatch.setattr(scale, "simulate", lambda *a, **k: _History())
        return len(fn(tmp_path, quick=quick, rounds=1)["runs"])
    elif name == "fedgradmp-fig2-video":  # a small random clip in place of the real one
        frames = np.random.default_rng(0).random((120, 16, 16))
        monkeypatch.setattr(fedgradmp, "load_sample_video", lambda: frames)
        return fn(tmp_path, quick=quick, rounds=1)["seeds"]
    else:
        raise AssertionError(f"{name}: no patch for it here")
    with pytest.raises(Seen) as seen:
        fn(tmp_path, quick=quick)
    return seen.value.args[0]


@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("name", sorted(set(python_experiments()) - WITHOUT_DEFAULT))
def test_the_declared_default_seeds_are_the_seeds_run(name, quick, tmp_path, monkeypatch):
    declared = python_experiments()[name].default_seeds
    assert declared is not None, f"{name} declares no default seeds"
    assert _seeds_run(name, quick, tmp_path, monkeypatch) == declared(quick)


def test_only_the_experiments_with_another_layout_declare_no_default():
    assert {n for n, e in python_experiments().items() if e.default_seeds is None} \
        == WITHOUT_DEFAULT
    # and the declarations differ where the experiments do
    seeds = {n: e.default_seeds(False) for n, e in python_experiments().items()
             if e.default_seeds is not None}
    assert seeds["safari-fmnist"] == 3 and seeds["safari-pruners"] == 2
    assert seeds["fedmac-table1-fmnist"] == 3 and seeds["fedmac-fig2"] == 2
