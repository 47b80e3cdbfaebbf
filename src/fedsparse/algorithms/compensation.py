"""Similarity-based compensation for lost uploads (Mao et al. 2022, SAFARI, Alg. 3), as a
server-side wrapper around any algorithm whose uploads are models.

The server keeps a record ``rho`` of the distances between the uploads of clients
received in the same round::

    rho_uv = || x_u - x_v ||_2            for every pair u != v received in round t   (eq. 35)

and replaces each sampled client j whose upload was lost by the received client j' that
is closest to j in the record::

    j' = argmin_{i received} rho_ij       (lowest client id on ties; Alg. 3 prints "maximize",
                                           a typo: rho is a distance)
    x_{t+1} = aggregate( x_i for i received, x_{j'} in place of each lost j )

A lost client with no recorded distance to any received one is dropped and the weights are
renormalised over the rest. The record is updated every round (not computed once, a bug of
the public code), a pair measured again keeping its latest distance; each round records
``compensated`` (lost uploads replaced) and ``dropped`` (lost and never compared).

Storage. ``rho`` is symmetric with an empty diagonal, and only pairs that were received in
the same round have a value (the rest are +inf, "never measured"). With S clients sampled
a round, a run of T rounds measures at most ``min(N (N - 1) / 2, T S (S - 1) / 2)`` pairs,
while the dense (N, N) matrix would take 8 N^2 bytes: 80 GB at N = 10^5, 8 TB at
N = 10^6. The record is therefore kept sparse, as the server state entry
``"similarity"``, a dict of two (M,) tensors for the M pairs measured so far::

    pairs     : (M,) int64, u * N + v for each measured pair u < v, strictly increasing
    distances : (M,) float64, rho_uv (finite, >= 0): its latest measurement

16 bytes per measured pair. A round merges its R (R - 1) / 2 received pairs in one
vectorised pass over the record (O(M + R^2)) and looks up the L x R lost-vs-received
distances with a binary search (O(L R log M)); a record the wrapper did not build itself
(the first round's, a resumed checkpoint's) is checked once (:func:`check_record`).
:func:`dense_record` expands the record to the (N, N) matrix for small N (plots).
The distances are computed pair by pair (not from ``|x|^2 + |y|^2 - 2 x.y``, which loses
the digits that tell close uploads apart and is not exactly symmetric), so a pair's
distance does not depend on which client is lost. The record lives in the server state
on the CPU (the uploads' device computes the distances) and is checkpointed with it,
beside the wrapped algorithm's state, which is nested whole under ``"inner"``
(:mod:`fedsparse.algorithms.wrapper`).
"""

from __future__ import annotations

import torch

from .._validation import ConfigError, fail
from .base import Algorithm, Cohort
from .wrapper import INNER, Wrapper

#: The largest N whose pair keys u * N + v fit in int64.
MAX_CLIENTS = 3_037_000_499


class SimilarityCompensation(Wrapper):
    """``inner`` with lost uploads replaced by their most similar received ones.

    Its server state is ``{"inner": <inner's state>, "similarity": <the record>,
    "compensated": int, "dropped": int}`` (:mod:`fedsparse.algorithms.wrapper`).

    Parameters
    ----------
    inner : an algorithm whose uploads are models (``inner.uploads_are_models``).
    """

    def __init__(self, inner: Algorithm):
        super().__init__(inner)
        if not inner.uploads_are_models:
            raise fail("algorithm", inner.name, "uploads no models (its uploads are not in the "
                       "model space), so distances between them mean nothing; similarity "
                       "compensation needs uploads that are models")
        if isinstance(inner, SimilarityCompensation):
            # two records of one upload stream would both fill the same lost rows
            raise fail("algorithm", inner.name, "is already wrapped with similarity "
                       "compensation (safari() compensates unless compensation=False)")

    def hyperparameters(self):
        return {**self.inner.hyperparameters(), "compensation": True}

    @property
    def round_metric_names(self):
        return (*self.inner.round_metric_names, "compensated", "dropped")

    def __repr__(self):
        return f"similarity_compensation({self.inner!r})"

    def state_bytes(self, num_clients, model_size, itemsize):
        # The sparse record starts empty and grows by at most S (S - 1) / 2 pairs of 16
        # bytes a round, as many as the channel lets arrive together: no N^2 term, and
        # nothing a run is sure to need up front (a channel that loses every upload never
        # measures a pair), so the lower bound the check takes adds nothing here.
        return self.inner.state_bytes(num_clients, model_size, itemsize)

    def _bind(self, problem, spec, stats):
        if spec.num_clients > MAX_CLIENTS:
            raise fail("num_clients", spec.num_clients, f"must be at most {MAX_CLIENTS} "
                       "with similarity compensation (its record keys a pair of clients u, "
                       "v by u * N + v, an int64)")
        super()._bind(problem, spec, stats)
        self._built = None  # the pairs of the record the last round built (trusted)

    def init(self, problem, seed=0):
        return {**super().init(problem, seed), "similarity": empty_record(), "compensated": 0,
                "dropped": 0}

    def round_metrics(self, state):
        # the wrapped algorithm's (FedMac's bits and densities) and its own counts
        return {**self.inner.round_metrics(state[INNER]),
                "compensated": state["compensated"], "dropped": state["dropped"]}

    def aggregate(self, state, uploads, cohort):
        N = self.spec.num_clients
        record = state["similarity"]
        # a record this bound algorithm did not build last round (the first round's, a
        # resumed checkpoint's) is checked in full once: O(M), as long as the merge
        if not isinstance(record, dict) or record.get("pairs") is not self._built:
            check_record(record, N)
        sim = update_similarity(record, uploads, cohort, N)
        self._built = sim["pairs"]
        uploads, delivered, dropped = substitute(sim, uploads, cohort, N)
        inner = self.inner.aggregate(state[INNER], uploads,
                                     Cohort(cohort.round, cohort.clients, cohort.weights,
                                            delivered, cohort.seed))
        return {INNER: inner, "similarity": sim,
                "compensated": int(delivered.sum() - cohort.delivered.sum()),
                "dropped": dropped}


# ------------------------------------------------------------------------ the record


def empty_record(device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The record of a run that has measured nothing: ``{"pairs": (0,) int64,
    "distances": (0,) float64}`` on ``device``."""
    return {"pairs": torch.empty(0, dtype=torch.int64, device=device),
            "distances": torch.empty(0, dtype=torch.float64, device=device)}


def check_record(record: dict, num_clients: int) -> None:
    """Refuse a record that is not one this module builds (a damaged checkpoint).

    Parameters
    ----------
    record : ``{"pairs": (M,) int64, "distances": (M,) float64}``.
    num_clients : N.

    Raises
    ------
    ConfigError
        naming the entry: not two 1-D tensors of equal length and those dtypes, pairs
        not strictly increasing or not of the form u * N + v with 0 <= u < v < N,
        distances negative or not finite.
    """
    where = "the server state's similarity record"
    if not isinstance(record, dict) or set(record) != {"pairs", "distances"}:
        raise ConfigError(f"{where} is damaged: it must be a dict of 'pairs' and "
                          "'distances'")
    pairs, dist = record["pairs"], record["distances"]
    for name, t, dtype in (("pairs", pairs, torch.int64), ("distances", dist, torch.float64)):
        if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.ndim != 1:
            raise ConfigError(f"{where} is damaged: {name!r} must be a 1-D {dtype} tensor")
    if pairs.shape != dist.shape:
        raise ConfigError(f"{where} is damaged: it holds {pairs.numel()} pairs but "
                          f"{dist.numel()} distances")
    if pairs.numel() == 0:
        return
    u, v = pairs.div(num_clients, rounding_mode="floor"), pairs.remainder(num_clients)
    # one synchronisation for all the tests
    bad = torch.stack([(pairs[1:] <= pairs[:-1]).any(), (u < 0).any() | (u >= v).any(),
                       ~((dist >= 0) & (dist < float("inf"))).all()]).tolist()  # NaN too
    for failed, what in zip(bad, ("its pairs are not strictly increasing",
                                  f"a pair is not u * N + v with 0 <= u < v < N = "
                                  f"{num_clients}",
                                  "a distance is negative or not finite"), strict=True):
        if failed:
            raise ConfigError(f"{where} is damaged: {what}")


def update_similarity(record: dict, uploads: torch.Tensor, cohort: Cohort,
                      num_clients: int) -> dict[str, torch.Tensor]:
    """The record with every pair received in this round (re-)measured (eq. 35).

    Parameters
    ----------
    record : ``{"pairs": (M,) int64, "distances": (M,) float64}`` (module docstring).
    uploads : (S, P) the round's uploads; cohort : who they are and which arrived.
    num_clients : N.

    Returns
    -------
    dict
        The new record, with M' <= M + R (R - 1) / 2 pairs for the R received clients
        (a measured pair keeps its latest distance); ``record`` is not modified. One
        ``cdist`` over the received uploads (O(R^2 P)) and one merge (O(M + R^2)).
    """
    pairs, dist = record["pairs"], record["distances"]
    rows = torch.nonzero(cohort.delivered).flatten()
    R = int(rows.numel())
    if R < 2:
        return record
    ids = cohort.clients[rows].to(pairs.device)
    got = uploads[rows.to(uploads.device)].to(torch.float64)
    d = torch.cdist(got[None], got[None], compute_mode="donot_use_mm_for_euclid_dist")[0]
    i, j = torch.triu_indices(R, R, offset=1, device=d.device)
    new_d = d[i, j].to(dist.device)
    i, j = i.to(pairs.device), j.to(pairs.device)
    lo, hi = torch.minimum(ids[i], ids[j]), torch.maximum(ids[i], ids[j])
    new_p, order = torch.sort(lo * num_clients + hi)  # sorted already for ascending ids
    return _merge(pairs, dist, new_p, new_d[order])


def _merge(pairs: torch.Tensor, dist: torch.Tensor, new_p: torch.Tensor,
           new_d: torch.Tensor) -> dict[str, torch.Tensor]:
    """``(pairs, dist)`` with the sorted, distinct ``new_p`` set to ``new_d``: the pairs
    already there overwritten, the others inserted in order (one pass, no sort). The
    inputs are not modified (a record with no new pair shares their ``pairs``)."""
    M = pairs.numel()
    at = torch.searchsorted(pairs, new_p)
    # at == M only for a pair above all of them, so the clamped look never matches it
    seen = pairs[at.clamp(max=M - 1)] == new_p if M else torch.zeros_like(new_p, dtype=torch.bool)
    add_p, add_at = new_p[~seen], at[~seen]
    n = add_p.numel()
    if n == 0:
        out_p, out_d = pairs, dist.clone()
    else:
        # an inserted pair lands after the old pairs below it and the inserted ones
        # before it; the old ones fill the other places in order (masked_scatter_: one
        # pass, several times faster than indexing with the mask)
        slot = add_at + torch.arange(n, device=pairs.device)
        old = torch.ones(M + n, dtype=torch.bool, device=pairs.device)
        old[slot] = False
        out_p = torch.empty(M + n, dtype=pairs.dtype, device=pairs.device)
        out_d = torch.empty(M + n, dtype=dist.dtype, device=dist.device)
        out_p.masked_scatter_(old, pairs)
        out_d.masked_scatter_(old, dist)
        out_p[slot], out_d[slot] = add_p, new_d[~seen]
    # a re-measured pair: its old position, shifted by the inserted pairs below it
    again = at[seen] + torch.searchsorted(add_p, new_p[seen])
    out_d[again] = new_d[seen]
    return {"pairs": out_p, "distances": out_d}


def lookup(record: dict, u: torch.Tensor, v: torch.Tensor, num_clients: int
           ) -> torch.Tensor:
    """``rho_uv`` for client ids ``u``, ``v`` of any (broadcastable) shapes, +inf where
    the pair was never measured or ``u == v``; on the record's device."""
    pairs, dist = record["pairs"], record["distances"]
    u, v = u.to(pairs.device), v.to(pairs.device)
    keys = torch.minimum(u, v) * num_clients + torch.maximum(u, v)
    M = pairs.numel()
    if M == 0:
        return torch.full(keys.shape, float("inf"), dtype=dist.dtype, device=dist.device)
    at = torch.searchsorted(pairs, keys.flatten()).clamp_(max=M - 1).view(keys.shape)
    hit = (pairs[at] == keys) & (u != v)
    return torch.where(hit, dist[at], torch.tensor(float("inf"), dtype=dist.dtype,
                                                   device=dist.device))


def substitute(record: dict, uploads: torch.Tensor, cohort: Cohort, num_clients: int
               ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Lost uploads replaced by the received upload closest in ``record`` (Alg. 3).

    Parameters
    ----------
    record : the record (module docstring), already updated with this round.
    uploads : (S, P); cohort : the round's clients, ascending, and which arrived.
    num_clients : N.

    Returns
    -------
    uploads : (S, P) with each compensated row a copy of its substitute's upload.
    delivered : (S,) bool, received or compensated.
    dropped : number of lost clients with no recorded distance to any received one.
    """
    received = cohort.delivered
    lost = torch.nonzero(~received).flatten()
    got = torch.nonzero(received).flatten()
    if lost.numel() == 0 or got.numel() == 0:
        return uploads, received, int(lost.numel()) if got.numel() == 0 else 0
    # (L, R) lost-vs-received distances; clients ascend within the cohort, so min's first
    # minimum is the lowest id
    d = lookup(record, cohort.clients[lost][:, None], cohort.clients[got][None, :],
               num_clients)
    best, pick = d.min(dim=1)
    known = torch.isfinite(best).cpu()
    out = uploads.clone()
    src = got[pick.cpu()][known]
    dst = lost[known]
    out[dst.to(out.device)] = uploads[src.to(out.device)]
    delivered = received.clone()
    delivered[dst] = True
    return out, delivered, int((~known).sum())


def dense_record(record: dict, num_clients: int) -> torch.Tensor:
    """The record as the (N, N) float64 matrix ``rho`` (symmetric, +inf where never
    measured and on the diagonal): 8 N^2 bytes, for small N (plots, tests)."""
    pairs, dist = record["pairs"], record["distances"]
    out = torch.full((num_clients, num_clients), float("inf"), dtype=torch.float64,
                     device=dist.device)
    u, v = pairs.div(num_clients, rounding_mode="floor"), pairs.remainder(num_clients)
    out[u, v] = dist
    out[v, u] = dist
    return out


def similarity_compensation(algorithm: Algorithm) -> SimilarityCompensation:
    """Wrap ``algorithm`` with SAFARI's similarity-based compensation (Mao et al. 2022,
    Alg. 3): each lost upload is replaced by the received upload of the client most
    similar to it in the server's distance record (see the module docstring).

    Parameters
    ----------
    algorithm : any algorithm whose uploads are models (FedAvg, FedProx, the hard
        thresholding family, SAFARI's sparse training, ...).
    """
    return SimilarityCompensation(algorithm)
