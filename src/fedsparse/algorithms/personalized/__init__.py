"""Personalised federated learning: FedMac (Liu et al. 2023) and its baselines pFedMe
(Dinh et al. 2020), Per-FedAvg (Fallah et al. 2020, first order) and HeurFedAMP (Huang
et al. 2021), with the choices of docs/decisions.md, section 5; one module per algorithm.

Each client keeps a personalised model (PM) in its client state, and the simulator
records, beside the global model (GM), every client's PM on its own train and test split
(``personal_accuracy``, ``personal_test_accuracy``; ``history.personal_models``). The
client state is ``{"personal": (N, P), "trained": (N,) bool}``; a client that has not
trained yet is represented by the global model (HeurFedAMP: by the server's copy of its
model, the initial model until it uploads). Every algorithm here needs a classification
problem (linear softmax or logistic, or a neural network): personalised models are
compared by accuracy. What the four share is in :mod:`.base`; what FedMac and pFedMe
share (the round of Liu et al. 2023, Alg. 1) in :mod:`.coupled`.

Which clients train, which are averaged (a decision, documented here)
---------------------------------------------------------------------
In FedMac and pFedMe **all N clients** run the client update every round and upload
(Liu et al. 2023, Alg. 1: ``ClientUpdate`` returns w_i to the server), and the server
averages a uniformly drawn set S^t of S of them (so the byte records count N uploads
and N broadcasts a round, as Alg. 1 sends them). Here the algorithm's own
``clients_per_round`` is that S; the algorithm asks the simulator for every client
(``Algorithm.clients_per_round`` stays None), and the server draws S^t with
:func:`averaged_clients`, a counter-based draw keyed by (seed, round, client id) on the
``rng.ALGORITHM`` stream (:meth:`~fedsparse.algorithms.Cohort.random`), so the same S^t
comes out whatever the grouping of clients and on resume. Give S to the builder, not to
``simulate``: a ``simulate(..., clients_per_round=k)`` makes only k clients train, and
S^t is then drawn among those k. Lost uploads (a channel) are left out of the average,
renormalised over those of S^t that arrived; if none of S^t arrived the model is kept.

Per-FedAvg and HeurFedAMP train only the sampled clients (``simulate``'s
``clients_per_round``). Per-FedAvg's PM of a client is the one-step adaptation of the
model it last received, on a TRAIN batch, computed when it was last sampled; Fallah et
al.'s evaluation (and pFedMe's code) adapts every client from the current global model
at evaluation time, which needs client data where ``Algorithm.personalized`` has none.
So a PM recorded after round t adapts w^t, the model broadcast in round t (the GM
recorded beside it is w^{t+1}), and with S < N the PM of a client not sampled in round t
adapts an earlier global model.

Server averaging is uniform (1/S, not p_i) with the beta rule
``w <- (1 - beta) w + (beta / S) sum_{i in S^t} w_i`` (FedMac, pFedMe); Per-FedAvg
averages its sampled clients uniformly.
"""

from .base import PersonalizedAlgorithm
from .coupled import AVERAGED_DRAW, CoupledPersonalization, averaged_clients, fedmac_bits
from .fedmac import FedMac, fedmac
from .heur_fedamp import HeurFedAMP, attention_models, heur_fedamp
from .per_fedavg import PerFedAvg, per_fedavg
from .pfedme import PFedMe, pfedme

__all__ = [
    "AVERAGED_DRAW",
    "CoupledPersonalization",
    "FedMac",
    "HeurFedAMP",
    "PFedMe",
    "PerFedAvg",
    "PersonalizedAlgorithm",
    "attention_models",
    "averaged_clients",
    "fedmac",
    "fedmac_bits",
    "heur_fedamp",
    "per_fedavg",
    "pfedme",
]
