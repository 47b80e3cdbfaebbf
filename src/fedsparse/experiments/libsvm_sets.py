"""The LibSVM path of Tong et al. 2022's Figure 6 as data: which stand-in data sets,
with which problem, sparsity and step sizes, and the config that runs them.

Pure configuration (no fedsparse import): both the experiment that runs it
(:mod:`fedsparse.experiments.real_data`) and ``fedsparse show``
(:mod:`fedsparse.experiments.registry`) read it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["LABELS", "LIBSVM_SETS", "libsvm_config"]

#: The LibSVM stand-ins: (panel, loader, problem table, tau, step sizes by algorithm).
#: Steps: the lowest round-50 objective over the paper's grid [10, 1, 0.6, 0.3, 0.1, 0.06,
#: 0.03, 0.01, 0.001], by ``run_sweep(libsvm_config(paths, rounds=50),
#: {"algorithm.step_size": grid})`` (see docs/results/real-data.md).
LIBSVM_SETS = (
    ("breast_cancer (logistic, d = 30)", "breast_cancer", {"kind": "logistic"}, 10,
     {"distributed_iht": 10.0, "fed_ht": 10.0, "fed_iter_ht": 10.0}),
    ("diabetes (least squares, d = 10)", "diabetes", {"kind": "least_squares"}, 5,
     {"distributed_iht": 1.0, "fed_ht": 0.3, "fed_iter_ht": 0.3}),
)
#: Legend labels of the three algorithms compared.
LABELS = {"distributed_iht": "Distributed-IHT", "fed_ht": "Fed-HT", "fed_iter_ht": "FedIter-HT"}


def libsvm_config(paths: dict[str, Path], rounds: int = 200) -> dict:
    """The config a user would write for E2006 / RCV1, pointed at the converted files.

    The small data sets get 25 clients from 10 K-means clusters cut into 5 parts (the
    paper's 20 parts would leave K-means clusters of 16 examples with empty parts).
    """
    runs = []
    for panel, name, problem, tau, steps in LIBSVM_SETS:
        for kind, label in LABELS.items():
            algo = {"kind": kind, "sparsity": tau, "step_size": steps[kind], "batch_size": 8}
            if kind != "distributed_iht":
                algo["local_steps"] = 5
            runs.append({"panel": panel, "label": label, "problem": problem, "algorithm": algo,
                         "data": {"kind": "libsvm_file", "path": str(paths[name]),
                                  "partition": "clusters", "num_clients": 25,
                                  "num_clusters": 10, "parts_per_cluster": 5,
                                  "clusters_per_client": 2, "scale": "maxabs",
                                  "test_fraction": 0.2, "seed": 0,
                                  "standardize_target": problem["kind"] == "least_squares"}})
    return {"title": "Tong et al. 2022 Fig. 6, LibSVM path: real data converted to svmlight",
            "description": "breast_cancer (logistic, tau = 10) and diabetes (least squares, "
                           "tau = 5) written as svmlight files and read back as CSR; 25 "
                           "clients from K-means clusters; K = 5 local steps of 8 examples.",
            "paper_claim": "FedIter-HT performs consistently better across all data sets.",
            "defaults": {"rounds": rounds, "seed": 0, "dtype": "float64"},
            "runs": runs,
            "compare": {"reference": "Distributed-IHT", "at_rounds": [50, 100, 200]},
            "plot": {"y": ["objective", "test_accuracy"], "x": ["round"]}}
