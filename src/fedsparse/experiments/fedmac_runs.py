"""The runs behind Liu et al. 2023's (FedMac) tables and figures: a config's runs over
seeds through the shared runner, saved per replicate and read back as means.

What these runs do beyond ``fedsparse run NAME-runs --seeds n`` (the same configs):

* every simulation runs on one torch thread (:func:`fedsparse._threads.torch_threads`);
* the models are evaluated every ``eval_every`` rounds (and at the last), since on
  Fashion-MNIST an evaluation of the global model and of the 20 personalised models on
  all 60,000 examples costs more than the round itself;
* replicates are the outer loop (:func:`fedsparse.experiments.seeds.iter_replicates`),
  with one data set in memory at a time, and more replicates can be added to a folder
  later (``first_seed``);
* FedAvg and FedProx average 1/S, as the paper does (:func:`uniform_weights`).

Replicate k adds k to the run seed and the data seed (:mod:`.seeds`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .._threads import torch_threads
from .._validation import fail
from ..history import History
from .config import load_config, resolve_runs
from .registry import CONFIG_DIR
from .run_selection import apply_overrides
from .runner import data_key, execute_run
from .seeds import average_seeds, device_fields, iter_replicates, seed_stats

#: Algorithms whose server averages the arrived uploads by the data set's client weights
#: p_i (renormalised among them). Liu et al. 2023 average 1/S for every method, so their
#: runs here get uniform client weights (:func:`uniform_weights`); FedMac, pFedMe,
#: Per-FedAvg and HeurFedAMP average uniformly by construction.
SIZE_WEIGHTED = ("fed_avg", "fed_prox")
#: Rounds between checkpoints of a run (what ``resume`` continues from).
CHECKPOINT_EVERY = 10
#: Written beside a replicate's history when the simulator stopped it: the message.
DIVERGED = "DIVERGED"


@dataclass
class RunResult:
    """One run of a config over seeds.

    Attributes
    ----------
    label, panel, slug : the run's names in the config.
    mean : History of the mean over the seeds that did not diverge (``seeds`` holds
        every seed's History).
    stats : :func:`fedsparse.experiments.seeds.seed_stats` of ``mean``: ``best`` and
        ``final`` mean/std/n per metric.
    errors : one divergence message per diverged seed.
    """

    label: str
    panel: str
    slug: str
    mean: History
    stats: dict
    errors: list[str] = field(default_factory=list)


def named_config(name: str) -> dict:
    """The packaged experiment config ``name`` (``fedsparse show NAME``)."""
    return load_config(CONFIG_DIR / f"{name}.toml")


def quick_overrides(config: dict, *, rounds: int, examples: int | None = None,
                    size_scale: int | None = None) -> dict:
    """``config`` shortened for a quick run (a copy; ``config`` is not changed).

    Parameters
    ----------
    config : an experiment config.
    rounds : the number of rounds of every run.
    examples : real data (``federated_real``) is subsampled to this many images.
    size_scale : synthetic data (``fedprox_synthetic``) uses this client-size scale
        instead of Dinh et al. 2020's five-fold sizes.

    Returns
    -------
    dict
        the shortened config.
    """
    sets = []
    kind = config.get("defaults", {}).get("data", {}).get("kind")
    if examples is not None and kind == "federated_real":
        sets.append(("data.max_examples", examples))
    if size_scale is not None and kind == "fedprox_synthetic":
        sets.append(("data.size_scale", size_scale))
    return apply_overrides(config, sets, rounds)


def uniform_weights(data):
    """``data`` with every client weight 1/N: an average over S arrived clients is then
    the plain mean 1/S of their models, as Liu et al. 2023 average."""
    n = data.weights.shape[0]
    return dataclasses.replace(data, weights=torch.full_like(data.weights, 1.0 / n))


def run_config(config: dict, out: str | Path, *, seeds: int = 1, first_seed: int = 0,
               eval_every: int = 1, log=print, log_every: int = 0, resume: bool = False,
               device=None, weighting: str = "uniform") -> None:
    """Simulate every run of ``config`` for replicates ``first_seed .. first_seed + seeds
    - 1``, on one thread, and save each replicate's history to ``out/<run>/seed-<s>/``.

    Replicates are the outer loop (every run of seed 0, then of seed 1, ...), so only
    one data set is held at a time and a partial run already has every method on the
    first seeds; more seeds can be added to the same ``out`` later with ``first_seed``.
    :func:`load_results` reads the runs back.

    Parameters
    ----------
    config : an experiment config (:func:`fedsparse.experiments.config.load_config`).
    out : output folder.
    seeds : number of replicates (replicate k adds k to the run and data seeds).
    first_seed : the first replicate's k.
    eval_every : evaluate every k rounds and at the last round.
    log : called with one line per finished run.
    log_every : also log every this many rounds (0: never).
    resume : continue every replicate from its checkpoint
        (``out/<run>/seed-<s>/checkpoint.pt``, saved every :data:`CHECKPOINT_EVERY`
        rounds and at the end); a finished one is read back, not run again. The
        histories are those of an uninterrupted run.
    device : where the rounds run ("cpu", "cuda", "cuda:N", "auto"; None: the CPU).
    weighting : how FedAvg and FedProx (:data:`SIZE_WEIGHTED`) average the arrived
        uploads: "uniform" (1/S, the paper's) or "size" (by client size, renormalised).
    """
    out = Path(out)
    runs = resolve_runs(config)
    if weighting not in ("uniform", "size"):
        raise fail("weighting", weighting, 'must be "uniform" or "size"')
    where = device_fields(device)["device"]
    data_cache: dict = {}

    def prepare(run, data):
        uniform = weighting == "uniform" and run["algorithm"]["kind"] in SIZE_WEIGHTED
        return uniform_weights(data) if uniform else data

    def execute(seeded: dict):
        seeded = {**seeded, "device": where, "checkpoint_every": CHECKPOINT_EVERY}
        if data_key(seeded) not in data_cache:
            data_cache.clear()  # one data set in memory at a time
        tic = time.perf_counter()
        name = f"{seeded['label']} seed {seeded['seed']}"

        def progress(record, state):
            if log_every and record["round"] % log_every == 0:
                log(f"  {name}: round {record['round']} ({time.perf_counter() - tic:.0f} s)")

        (out / seeded["slug"]).mkdir(parents=True, exist_ok=True)
        history, error = execute_run(seeded, out, data_cache=data_cache, resume=resume,
                                     progress=False, callback=progress,
                                     eval_every=eval_every, prepare_data=prepare)
        if error:
            (out / seeded["slug"] / DIVERGED).write_text(error + "\n")
        log(f"  {name}: {seeded['rounds']} rounds in "
            f"{time.perf_counter() - tic:.0f} s" + (f" -- {error}" if error else ""))
        return history, error

    with torch_threads(1):
        for _ in iter_replicates(runs, seeds, execute, first_seed=first_seed):
            pass  # each replicate is saved as it finishes


def load_results(config: dict, out: str | Path, *, save_mean: bool = True
                 ) -> dict[tuple[str, str], RunResult]:
    """The runs of ``config`` that :func:`run_config` saved in ``out``, over every
    replicate found there (``out/<run>/seed-<s>/``); the mean over them is saved to
    ``out/<run>/`` (unless not ``save_mean``). A run folder without replicates that
    holds a history itself (the TOML runner without ``--seeds``) is read as one seed.

    Returns
    -------
    {(panel, label): RunResult}, for the runs with at least one replicate.
    """
    out = Path(out)
    results = {}
    for run in resolve_runs(config):
        folders = sorted((out / run["slug"]).glob("seed-*"),
                         key=lambda p: int(p.name.removeprefix("seed-")))
        single = not folders and (out / run["slug"] / "history.jsonl").exists()
        if single:
            folders = [out / run["slug"]]
        histories, errors = [], []
        for folder in folders:
            if not (folder / "history.jsonl").exists():
                continue
            h = History.load(folder)
            h.config = {"seed": run["seed"] if single
                        else int(folder.name.removeprefix("seed-"))}
            histories.append(h)
            errors.append((folder / DIVERGED).read_text().strip()
                          if (folder / DIVERGED).exists() else None)
        if not histories:
            continue
        mean, messages = average_seeds(histories, errors)
        if save_mean:
            mean.save(out / run["slug"], overwrite=True)
        results[(run["panel"], run["label"])] = RunResult(
            run["label"], run["panel"], run["slug"], mean, seed_stats(mean), messages)
    return results
