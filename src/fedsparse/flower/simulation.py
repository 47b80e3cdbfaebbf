"""Run a fedsparse job on Flower's simulation runtime (Ray backend) from Python."""

from __future__ import annotations

import os

from .._signals import stop_handlers_kept
from ..history import History
from .client_app import make_client_app
from .job import Job, job_from_config
from .server_app import make_server_app


def run_flower_simulation(job: Job | dict, *, num_cpus: int | None = None,
                          verbose: bool = False) -> History:
    """Run ``job`` on Flower's simulation runtime, one virtual SuperNode per client.

    Virtual node ``i`` gets the node config ``partition-id=i``, ``num-partitions=N``,
    so it trains client ``i`` of the job's data set, as in a deployment. The caller's
    SIGINT and SIGTERM handlers are in place again when it returns (Ray's start replaces
    SIGTERM's for the run).

    Parameters
    ----------
    job : a :class:`~fedsparse.flower.job.Job` or a job dict (see :mod:`.job`).
    num_cpus : CPUs Ray may use (default all); each ClientApp gets one.
    verbose : Flower's debug logging.

    Returns
    -------
    History of the run, with ``history.model`` the final global model.
    """
    from flwr.simulation import run_simulation

    if isinstance(job, dict):
        job = job_from_config(job)
    result: list[History] = []
    server = make_server_app(job, on_finish=result.append)
    client = make_client_app(job)
    cpus = num_cpus or os.cpu_count() or 1
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
               "init_args": {"num_cpus": cpus, "num_gpus": 0, "include_dashboard": False}}
    with stop_handlers_kept():  # Ray's init leaves a SIGTERM handler of its own
        run_simulation(server_app=server, client_app=client, num_supernodes=job.num_clients,
                       backend_config=backend, verbose_logging=verbose)
    if not result:
        raise RuntimeError("the Flower simulation ended without a result; see the log above")
    return result[0]
