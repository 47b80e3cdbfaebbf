"""Named experiments: packaged TOML configs and registered Python functions.

A TOML experiment lives in ``experiments/configs/<name>.toml`` (see
:mod:`fedsparse.experiments.config` for its schema). A Python experiment is a function
``fn(out: Path, *, quick=False, rounds=None, seeds=None, resume=False, device=None) ->
dict`` decorated with :func:`register_experiment` (None / False: the experiment's own
default); it writes its own files into ``out``, continues them from their checkpoints
with ``resume`` and records ``device``, ``gpu`` and ``wall_clock_s`` in its summary.json.

:data:`INFO` says, for ``fedsparse list``, which paper and figure each experiment
reproduces, roughly how long it takes and what it needs beyond fedsparse; a TOML config
that only serves a Python experiment (the Figure 6 bases) is hidden there, and
``fedsparse show`` prints it under the Python experiment's name.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .libsvm_sets import LIBSVM_SETS, libsvm_config

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass(frozen=True)
class PythonExperiment:
    name: str
    fn: Callable
    description: str
    paper: str
    #: ``quick -> n``: the number of seeds it runs when given none, where that is the
    #: same as being given n (so ``--resume --seeds n`` continues a run started without
    #: ``--seeds``); None where running without seeds is another form of its files.
    default_seeds: Callable[[bool], int] | None = None


_PYTHON: dict[str, PythonExperiment] = {}


def register_experiment(name: str, *, description: str, paper: str = "",
                        default_seeds: Callable[[bool], int] | None = None):
    """Decorator registering ``fn(out, *, quick=False, rounds=None, seeds=None,
    resume=False, device=None) -> dict`` as a named experiment; ``default_seeds`` as
    :attr:`PythonExperiment.default_seeds`."""

    def decorate(fn):
        _PYTHON[name] = PythonExperiment(name, fn, description, paper, default_seeds)
        return fn

    return decorate


def _import_experiment_modules() -> None:
    # Modules in this package register their Python experiments on import.
    import fedsparse.experiments as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name not in {"registry", "config", "runner", "sweep"}:
            importlib.import_module(f"fedsparse.experiments.{info.name}")


def toml_experiments() -> dict[str, Path]:
    return {p.stem: p for p in sorted(CONFIG_DIR.glob("*.toml"))}


def python_experiments() -> dict[str, PythonExperiment]:
    _import_experiment_modules()
    return dict(_PYTHON)


# ---------------------------------------------------------------------------------------
# What ``fedsparse list`` shows.

#: The papers, by authors and year, with the methods they introduce.
PAPERS = {
    "fedht": "Tong et al. 2022 (Fed-HT, FedIter-HT)",
    "fedgradmp": "Jeong et al. 2024 (FedGradMP)",
    "safari": "Mao et al. 2022 (SAFARI)",
    "fedmac": "Liu et al. 2023 (FedMac)",
}


@dataclass(frozen=True)
class Need:
    """Something an experiment needs beyond fedsparse itself.

    Parameters
    ----------
    short : a few words for the table ("[data] extra").
    how : how to get it (a pip or apt command, or the option that points at a file).
    modules : importable modules that provide it (all must import).
    paths : places where it may be installed (any one suffices).
    """

    short: str
    how: str
    modules: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()

    def available(self) -> bool | None:
        """True/False when it can be checked here, None when it cannot (a user file)."""
        if self.modules:
            return all(importlib.util.find_spec(m) is not None for m in self.modules)
        if self.paths:
            return any(Path(os.path.expanduser(p)).exists() for p in self.paths)
        return None


DATA_EXTRA = Need("[data] extra", "pip install 'fedsparse[data]'", ("sklearn", "mlxtend"))
SKLEARN = Need("scikit-learn", "pip install 'fedsparse[data]'", ("sklearn",))
VIDEO_EXTRA = Need("[video] extra", "pip install 'fedsparse[video]'", ("av", "skvideo"))
FASHION = Need("Fashion-MNIST", "apt-get install dataset-fashion-mnist (or the IDX files in "
               "$FEDSPARSE_DATA/fashion-mnist)",
               paths=("/usr/share/datasets/fashion-mnist",
                      os.path.join(os.environ.get("FEDSPARSE_DATA", "~/.cache/fedsparse"),
                                   "fashion-mnist")))
E2006 = Need("your E2006 file", "--set data.path=/path/to/E2006.train (LibSVM site)")
RCV1 = Need("your RCV1 file", "--set data.path=/path/to/rcv1_train.binary (LibSVM site)")


@dataclass(frozen=True)
class ExperimentInfo:
    """What ``fedsparse list`` says about one named experiment.

    Parameters
    ----------
    paper : a key of :data:`PAPERS`.
    figure : the figure it reproduces, e.g. "Figure 3" (sorts the listing).
    runtime : rough wall-clock time of the full run, as timed on a 2-core CPU machine.
    needs : what it needs beyond fedsparse.
    config : for a Python experiment, the TOML experiment it runs (``show`` prints it).
    hidden : a TOML config that only serves a Python experiment; listed with ``--all``.
    gpu : it wants a GPU (``--device cuda``): it trains a neural model long enough that
        its full run takes about ten minutes or more on the CPU.
    gpu_runtime : the full run's wall-clock time on a GPU, with the GPU's name: measured,
        or "estimated" from a few timed rounds; "" until measured (``list`` and ``show``
        then say so).
    """

    paper: str
    figure: str
    runtime: str
    needs: tuple[Need, ...] = ()
    config: str | None = None
    hidden: bool = False
    gpu: bool = False
    gpu_runtime: str = ""

    def device_note(self) -> str:
        """One line on the device: whether it wants a GPU, and the measured times."""
        if not self.gpu:
            return f"the CPU is enough (full run about {self.runtime})"
        return (f"wants a GPU (--device cuda): full run about {self.runtime} on the CPU, "
                f"{self.gpu_runtime or 'not measured yet on a GPU'}")


#: A GPU time estimated from timed rounds (docs/results/gpu-runs.md has them).
TIMED = " on an H100, estimated"

INFO: dict[str, ExperimentInfo] = {
    "fedht-default": ExperimentInfo("fedht", "Figure 3", "10 s"),
    "fedht-fig1": ExperimentInfo("fedht", "Figure 1", "75 s"),
    "fedht-fig2": ExperimentInfo("fedht", "Figure 2", "55 s"),
    "fedht-fig3": ExperimentInfo("fedht", "Figure 3", "35 s"),
    "fedht-fig3-auto": ExperimentInfo("fedht", "Figure 3 (equal step)", "40 s"),
    "fedht-fig3-literal-loss": ExperimentInfo("fedht", "Figure 3 (literal loss)", "1 min"),
    "fedht-fig3-minibatch": ExperimentInfo("fedht", "Figure 3 (mini-batches)", "2 min"),
    "fedht-fig3-one-over-n": ExperimentInfo("fedht", "Figure 3 (1/n objective)", "1.5 min"),
    "fig6-mnist5k": ExperimentInfo("fedht", "Figure 6", "20 min", (DATA_EXTRA,),
                                   config="fedht-fig6-mnist5k"),
    "fig6-fashion-mnist": ExperimentInfo("fedht", "Figure 6", "30 min", (FASHION,),
                                         config="fedht-fig6-fashion-mnist"),
    "fig6-libsvm": ExperimentInfo("fedht", "Figure 6", "2 min", (SKLEARN,)),
    "fedht-fig6-e2006": ExperimentInfo("fedht", "Figure 6", "hours", (E2006,)),
    "fedht-fig6-rcv1": ExperimentInfo("fedht", "Figure 6", "hours", (RCV1,)),
    "fedht-fig6-mnist5k": ExperimentInfo("fedht", "Figure 6", "10 min", (DATA_EXTRA,),
                                         hidden=True),
    "fedht-fig6-fashion-mnist": ExperimentInfo("fedht", "Figure 6", "15 min", (FASHION,),
                                               hidden=True),
    "fedgradmp-fig1": ExperimentInfo("fedgradmp", "Figure 1", "20 s"),
    "fedgradmp-fig2-video": ExperimentInfo("fedgradmp", "Figure 2", "2 min", (VIDEO_EXTRA,)),
    "fedgradmp-fig3": ExperimentInfo("fedgradmp", "Figure 3", "20 s"),
    "fedgradmp-fig4": ExperimentInfo("fedgradmp", "Figure 4", "20 s"),
    "fedgradmp-fig5": ExperimentInfo("fedgradmp", "Figure 5", "3 min"),
    "fedgradmp-fig6": ExperimentInfo("fedgradmp", "Figure 6", "5 min", (FASHION,)),
    "fedgradmp-fig7": ExperimentInfo("fedgradmp", "Figure 7", "5 min", (FASHION,)),
    "fedgradmp-fig8": ExperimentInfo("fedgradmp", "Figure 8", "20 s"),
    "fedgradmp-fig9": ExperimentInfo("fedgradmp", "Figure 9", "5 s"),
    "fedgradmp-fig10": ExperimentInfo("fedgradmp", "Figure 10", "4 min"),
    "fedgradmp-fig11": ExperimentInfo("fedgradmp", "Figure 11", "10 s"),
    "safari-fmnist": ExperimentInfo("safari", "Figures 2 and 5", "3.5 min", (FASHION,),
                                    gpu=True),
    "safari-fmnist-cnn": ExperimentInfo("safari", "Figures 2 and 5 (CNN)", "2.5 min",
                                        (FASHION,), gpu=True),
    "safari-pruners": ExperimentInfo("safari", "Figures 3-4", "10.5 min", (FASHION,),
                                     gpu=True),
    "safari-probability": ExperimentInfo("safari", "Figures 6-7", "2.5 min", (FASHION,)),
    "safari-sparsity": ExperimentInfo("safari", "Figure 8", "3.5 min", (FASHION,)),
    "safari-fedprox": ExperimentInfo("safari", "Figures 9-11", "2 min", (FASHION,)),
    "safari-paper-fig2": ExperimentInfo("safari", "Figures 2 and 5 (ResNet-20)", "days",
                                        (FASHION,), gpu=True, gpu_runtime=f"36 min{TIMED}"),
    "safari-paper-fig3": ExperimentInfo("safari", "Figure 3 (ResNet-20)", "days", (FASHION,),
                                        gpu=True, gpu_runtime=f"24 min{TIMED}"),
    "safari-paper-fig4": ExperimentInfo("safari", "Figure 4 (ResNet-20)", "days", (FASHION,),
                                        gpu=True, gpu_runtime=f"24 min{TIMED}"),
    "safari-paper-fig8": ExperimentInfo("safari", "Figure 8 (ResNet-20)", "days", (FASHION,),
                                        gpu=True, gpu_runtime=f"29 min{TIMED}"),
    "safari-paper-fedprox": ExperimentInfo("safari", "Figures 9-11 (ResNet-20)", "days",
                                           (FASHION,), gpu=True,
                                           gpu_runtime=f"44 min{TIMED}"),
    "fedmac-table1-vgg": ExperimentInfo("fedmac", "Table 1 (CIFAR-100 row stand-in, VGG)",
                                        "hours", (FASHION,), config="fedmac-table1-vgg-runs",
                                        gpu=True, gpu_runtime=f"64 min{TIMED}"),
    "fedmac-table1-vgg-runs": ExperimentInfo("fedmac", "Table 1 (CIFAR-100 row stand-in)",
                                             "hours", (FASHION,), hidden=True, gpu=True),
    "fedmac-table1-fmnist": ExperimentInfo("fedmac", "Table 1 (Fashion-MNIST row)",
                                           "70 min (3 seeds)", (FASHION,),
                                           config="fedmac-table1-fmnist-runs", gpu=True),
    "fedmac-table1-synthetic": ExperimentInfo("fedmac", "Table 1 (Synthetic row)",
                                              "30 min (3 seeds)",
                                              config="fedmac-table1-synthetic-runs", gpu=True),
    "fedmac-table1-mnist5k": ExperimentInfo("fedmac", "Table 1 (MNIST row, MNIST-5k)",
                                            "45 min (3 seeds)", (DATA_EXTRA,),
                                            config="fedmac-table1-mnist5k-runs", gpu=True),
    "fedmac-fig2": ExperimentInfo("fedmac", "Figure 2", "50 min (2 seeds)", (DATA_EXTRA,),
                                  config="fedmac-fig2-mnist5k-runs", gpu=True),
    "fedmac-fig3": ExperimentInfo("fedmac", "Figure 3", "30 min (2 seeds)", (DATA_EXTRA,),
                                  config="fedmac-fig3-mnist5k-runs", gpu=True),
    "fedmac-fig4": ExperimentInfo("fedmac", "Figures 4-5", "45 min (2 seeds)", (FASHION,),
                                  config="fedmac-fig4-fmnist-runs", gpu=True),
    "fedmac-fig6": ExperimentInfo("fedmac", "Figure 6", "2 h (2 seeds)", (DATA_EXTRA,),
                                  config="fedmac-fig6-mnist5k-runs", gpu=True),
    "fedmac-table1-fmnist-runs": ExperimentInfo("fedmac", "Table 1 (Fashion-MNIST row)",
                                                "20 min", (FASHION,), hidden=True, gpu=True),
    "fedmac-table1-synthetic-runs": ExperimentInfo("fedmac", "Table 1 (Synthetic row)",
                                                   "10 min", hidden=True, gpu=True),
    "fedmac-table1-mnist5k-runs": ExperimentInfo("fedmac", "Table 1 (MNIST row)", "18 min",
                                                 (DATA_EXTRA,), hidden=True, gpu=True),
    "fedmac-fig2-mnist5k-runs": ExperimentInfo("fedmac", "Figure 2", "25 min", (DATA_EXTRA,),
                                               hidden=True, gpu=True),
    "fedmac-fig3-mnist5k-runs": ExperimentInfo("fedmac", "Figure 3", "15 min", (DATA_EXTRA,),
                                               hidden=True, gpu=True),
    "fedmac-fig4-fmnist-runs": ExperimentInfo("fedmac", "Figures 4-5", "20 min", (FASHION,),
                                              hidden=True, gpu=True),
    "fedmac-fig6-mnist5k-runs": ExperimentInfo("fedmac", "Figure 6", "65 min", (DATA_EXTRA,),
                                               hidden=True, gpu=True),
    "fedavg-fmnist": ExperimentInfo("fedmac", "Table 1 baselines (FedAvg, FedProx)", "2 min",
                                    (FASHION,)),
    "scale-million": ExperimentInfo("", "Cross-device scale (10^6 clients)", "4 min"),
}
#: Internal paper numbers in older titles and descriptions -> :data:`PAPERS` keys.
_PAPER_NUMBERS = {"000": "fedht", "002": "fedgradmp"}
#: The experiment ``fedsparse run`` runs without a name (listed first).
DEFAULT = "fedht-default"


def name_papers(text: str) -> str:
    """``text`` with internal paper numbers ("Paper 000", "paper 002's") replaced by the
    authors and year, for everything the command line prints."""

    def repl(m: re.Match) -> str:
        key = _PAPER_NUMBERS.get(m.group(1))
        return PAPERS[key].split(" (")[0] if key else m.group(0)

    return re.sub(r"\b[Pp]aper[ -](\d{3})\b", repl, text)


@dataclass(frozen=True)
class ListedExperiment:
    """One row of ``fedsparse list``."""

    name: str
    kind: str          # "TOML" or "Python"
    paper: str         # authors and year
    figure: str
    title: str
    runtime: str
    needs: tuple[Need, ...]
    quick: bool        # has a --quick form
    hidden: bool
    gpu: bool = False  # wants a GPU (ExperimentInfo.gpu)
    gpu_runtime: str = ""


def _paper_of(name: str, info: ExperimentInfo | None, number: str = "") -> str:
    if info is not None:
        return info.paper
    if number in _PAPER_NUMBERS:
        return _PAPER_NUMBERS[number]
    return next((key for key in PAPERS if name.startswith(key)), "")


def _clean_title(text: str) -> str:
    """A title without the paper's name in front (the listing groups by paper)."""
    text = re.sub(r"^Paper \d{3}\s*", "", text.strip())
    for paper in PAPERS.values():
        authors = paper.split(" (")[0]
        if text.startswith(authors):
            text = text[len(authors):].lstrip(" ,:")
    text = name_papers(text)
    return text[0].upper() + text[1:] if text else text


def _figure_of(title: str) -> str:
    m = re.search(r"\bFig(?:ure|\.)\s*(\d+)", title)
    return f"Figure {m.group(1)}" if m else ""


def _figure_key(name: str, figure: str) -> tuple:
    m = re.search(r"\d+", figure)
    return (name != DEFAULT, int(m.group()) if m else 0, figure)


def has_quick(fn: Callable) -> bool:
    """True if a Python experiment function takes ``quick``."""
    return "quick" in inspect.signature(fn).parameters


def experiment_rows(*, include_hidden: bool = False) -> list[ListedExperiment]:
    """Every named experiment, grouped by paper and sorted by figure."""
    from .config import load_config

    rows = []
    for name, path in toml_experiments().items():
        info = INFO.get(name)
        title = load_config(path).get("title", "")
        m = re.match(r"Paper (\d{3})", title)
        rows.append(ListedExperiment(
            name, "TOML", _paper_of(name, info, m.group(1) if m else ""),
            info.figure if info else _figure_of(title), _clean_title(title),
            info.runtime if info else "?", info.needs if info else (), False,
            bool(info and info.hidden), bool(info and info.gpu),
            info.gpu_runtime if info else ""))
    for name, exp in python_experiments().items():
        info = INFO.get(name)
        rows.append(ListedExperiment(
            name, "Python", _paper_of(name, info, exp.paper),
            info.figure if info else _figure_of(exp.description),
            _clean_title(exp.description), info.runtime if info else "?",
            info.needs if info else (), has_quick(exp.fn), bool(info and info.hidden),
            bool(info and info.gpu), info.gpu_runtime if info else ""))
    order = list(PAPERS)
    rows.sort(key=lambda r: (order.index(r.paper) if r.paper in order else len(order),
                             *_figure_key(r.name, r.figure), r.kind, r.name))
    return [r for r in rows if include_hidden or not r.hidden]


def list_experiments() -> list[tuple[str, str]]:
    """(name, one-line description) of every listed experiment, sorted by name."""
    return sorted((r.name, r.title) for r in experiment_rows())


#: What a Python experiment adds after the config it runs, by paper (``show``).
_AFTER = {"fedmac": "then prints the paper's table of each model's best mean test accuracy "
                    "over rounds (GM/PM), mean ± std over the seeds, beside Liu et al. "
                    "2023's numbers"}


def shown_config(name: str) -> tuple[str, str]:
    """(header comment, TOML text) of a named experiment's parameters, for ``show``.

    A TOML experiment shows its file; a Python experiment the config it runs (with a
    header saying what it adds); the video experiment, whose parameters are fixed in
    code, its description.

    Raises
    ------
    KeyError
        when ``name`` is not a named experiment.
    """
    tomls = toml_experiments()
    if name in tomls:
        return "", name_papers(tomls[name].read_text())
    exp = python_experiments()[name]
    info = INFO.get(name)
    header = f"# {name}: a Python experiment. {name_papers(exp.description)}.\n"
    if info is not None and info.config in tomls:
        # only Tong et al. 2022's Figure 6 has an f* (a centralised reference run)
        then, without = (("then a long centralised run for f*", " (without f*)")
                         if info.paper == "fedht" else (_AFTER.get(info.paper, "then "
                                                                   "its own analysis"), ""))
        header += (f"# It runs the config below ({info.config}), {then}.\n"
                   f"# Its options: --quick, --rounds N, --seeds N, --resume, --device.\n"
                   f"# To change its runs: fedsparse run {info.config} --set ...{without}, "
                   f"or fedsparse sweep {info.config} --grid ...\n")
        return header, name_papers(tomls[info.config].read_text())
    if name == "fig6-libsvm":
        import tomli_w

        paths = {n: Path("OUT/data") / f"{n}.svm" for _, n, *_ in LIBSVM_SETS}
        header += ("# It writes scikit-learn's data sets as svmlight files into OUT/data, "
                   "runs the config below, then a long centralised run for f*.\n")
        return header, name_papers(tomli_w.dumps(libsvm_config(paths)))
    doc = name_papers(_description(inspect.getdoc(exp.fn) or ""))
    params = inspect.signature(exp.fn).parameters
    takes = ", ".join(flag for key, flag in _OPTIONS if key in params) or "no options"
    header += (f"# Its parameters are fixed in code (no config to edit; fedsparse run {name} "
               f"takes {takes}):\n")
    return header, "".join(f"# {line}\n".replace("# \n", "#\n") for line in doc.splitlines())


#: The command-line options of a Python experiment, by the parameter that takes each.
_OPTIONS = (("quick", "--quick"), ("rounds", "--rounds N"), ("seeds", "--seeds N"),
            ("resume", "--resume"), ("device", "--device"))


def _description(doc: str) -> str:
    """A numpydoc docstring without its sections (Parameters, Returns, ...): what the
    experiment does, in words."""
    lines = doc.splitlines()
    for i in range(len(lines) - 1):
        if lines[i].strip() and set(lines[i + 1].strip()) == {"-"}:
            return "\n".join(lines[:i]).rstrip()
    return doc
