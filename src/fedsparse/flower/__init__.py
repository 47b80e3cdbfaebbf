"""Run any fedsparse algorithm on Flower (``flwr``): ServerApp, ClientApp, codec, app projects.

This is the only package of fedsparse that imports ``flwr``. The math stays in the
:class:`~fedsparse.algorithms.Algorithm` objects; Flower only carries the messages:

* :func:`make_server_app` drives an algorithm round by round over Flower's grid with
  fedsparse's own seeded client sampling (:func:`fedsparse.simulate.sample_clients`),
  a ``query`` handshake that maps Flower node ids to fedsparse client (partition) ids,
  and the algorithm's own aggregation with a ``delivered`` mask built from error
  replies and timeouts;
* :func:`make_client_app` runs ``algorithm.client_update`` on the node's partition with
  the same counter-based random streams as the embedded simulator;
* :mod:`fedsparse.flower.codec` sends payloads as sparse (index, value), bitmap or
  dense arrays, with the exact byte counts of :func:`fedsparse.comm.payload_bytes`;
* :func:`write_app_project` writes a Flower app project so ``flwr run`` works on it.

Install with ``pip install 'fedsparse[flower]'``.
"""

from __future__ import annotations

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "fedsparse.flower needs Flower (flwr), which is not installed; install it with "
        "pip install 'fedsparse[flower]'") from exc

from .app_project import write_app_project
from .client_app import make_client_app
from .codec import decode, encode, encoded_bytes
from .job import job_from_config, job_to_run_config
from .server_app import make_server_app
from .simulation import run_flower_simulation

__all__ = [
    "decode",
    "encode",
    "encoded_bytes",
    "job_from_config",
    "job_to_run_config",
    "make_client_app",
    "make_server_app",
    "run_flower_simulation",
    "write_app_project",
]
