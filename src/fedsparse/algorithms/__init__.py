"""Federated algorithms. Each builder returns an :class:`Algorithm`."""

from .base import Algorithm, ClientContext, Cohort, DataSpec, weighted_mean
from .compensation import SimilarityCompensation, similarity_compensation
from .composite import FedDualAvg, FederatedComposite, FedMid, fed_dual_avg, fed_mid
from .fedavg import FederatedAveraging, fed_avg, fed_prox
from .gradmp import FedGradMP, fed_grad_mp
from .hard_thresholding import FederatedHardThresholding, distributed_iht, fed_ht, fed_iter_ht
from .personalized import (
    CoupledPersonalization,
    FedMac,
    HeurFedAMP,
    PerFedAvg,
    PersonalizedAlgorithm,
    PFedMe,
    fedmac,
    heur_fedamp,
    per_fedavg,
    pfedme,
)
from .safari import SparseTraining, safari

#: Builders by name, as used in experiment configs (``algorithm.kind``).
REGISTRY = {
    "fed_ht": fed_ht,
    "fed_iter_ht": fed_iter_ht,
    "distributed_iht": distributed_iht,
    "fed_grad_mp": fed_grad_mp,
    "fed_mid": fed_mid,
    "fed_dual_avg": fed_dual_avg,
    "fed_avg": fed_avg,
    "fed_prox": fed_prox,
    "safari": safari,
    "fedmac": fedmac,
    "pfedme": pfedme,
    "per_fedavg": per_fedavg,
    "heur_fedamp": heur_fedamp,
}

__all__ = [
    "REGISTRY",
    "Algorithm",
    "ClientContext",
    "Cohort",
    "CoupledPersonalization",
    "DataSpec",
    "FederatedAveraging",
    "FedDualAvg",
    "FederatedComposite",
    "FederatedHardThresholding",
    "FedGradMP",
    "FedMac",
    "FedMid",
    "HeurFedAMP",
    "PerFedAvg",
    "PFedMe",
    "PersonalizedAlgorithm",
    "SimilarityCompensation",
    "SparseTraining",
    "distributed_iht",
    "fed_avg",
    "fed_dual_avg",
    "fed_grad_mp",
    "fed_ht",
    "fed_iter_ht",
    "fed_mid",
    "fed_prox",
    "fedmac",
    "heur_fedamp",
    "per_fedavg",
    "pfedme",
    "safari",
    "similarity_compensation",
    "weighted_mean",
]
