"""Write a ready Flower app project for a fedsparse job, so that ``flwr run`` works on it.

The project::

    OUT/
      pyproject.toml            [project], [tool.flwr.app] (publisher, components) and
                                [tool.flwr.app.config] = the job (flattened by Flower)
      fedsparse_app/            thin modules re-exporting fedsparse's ServerApp/ClientApp
      flower-config.toml        SuperLink connections to merge into $FLWR_HOME/config.toml
      README.md                 how to run it

Flower 1.41 keeps SuperLink connections (the old ``[tool.flwr.federations]``) in
``$FLWR_HOME/config.toml`` rather than in pyproject.toml; ``flwr run`` on a pyproject
with federations migrates them there and rewrites the file. So the project ships them
as ``flower-config.toml`` and :func:`write_app_project` can merge them into a Flower
home directly (``flwr_home=``).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import tomli_w

from .._validation import ConfigError, check_int
from .job import Job, job_from_config, job_to_run_config

PACKAGE = "fedsparse_app"

_MODULE = '''"""{what} of this fedsparse job: fedsparse's own, configured by the run config."""

from fedsparse.flower.{module} import app

__all__ = ["app"]
'''

_README = """# fedsparse job on Flower: {name}

Written by `fedsparse flower app`. The job (data, problem, algorithm, rounds, seed)
is the `[tool.flwr.app.config]` table of `pyproject.toml`; override single values
with `flwr run . CONNECTION --run-config 'algorithm.sparsity=5'`.

Every SuperNode needs `fedsparse[flower]` installed and a node config naming its
client: `--node-config 'partition-id=0 num-partitions={num_clients}'` (clients
0..{last}), plus `data-path="/path/to/local.npz"` when the data lives on the node
(`data.kind = "node"`).

SuperLink connections are in `flower-config.toml`: merge them into
`$FLWR_HOME/config.toml` (or pass `--flwr-home` to `fedsparse flower app`), then

    flwr run . fedsparse-local          # insecure SuperLink on {address}
    flwr run . fedsparse-tls            # TLS (CA from --root-certificates)

For Flower's simulation runtime ({num_clients} virtual nodes, one per client):

    flower-superlink --insecure --simulation --host 127.0.0.1 --port 9092 \\
        --disable-runtime-dependency-installation
    flwr federation simulation-config @none/default fedsparse-sim --num-supernodes {num_clients}
    flwr run . fedsparse-sim

See docs/deploy.md of fedsparse for a full walk-through.
"""


def _slug(text: str) -> str:
    """A Flower app name: starts with a letter; letters, digits, hyphens; <= 32 chars."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not slug or not slug[0].isalpha():
        slug = "fedsparse-" + slug
    return slug[:32].rstrip("-")


def connections(*, address: str, root_certificates: str | None,
                sim_address: str = "127.0.0.1:9092") -> dict:
    """SuperLink connections for ``$FLWR_HOME/config.toml`` (``[superlink.NAME]`` tables).

    ``fedsparse-sim`` points at a SuperLink started with ``--simulation``: Flower's own
    managed local SuperLink (address ``:local:``) installs the app's dependencies at
    run time, which fails for a fedsparse that is not on a package index.

    Parameters
    ----------
    address : host:port of the deployment SuperLink (``fedsparse-local``, ``fedsparse-tls``).
    root_certificates : CA certificate path for ``fedsparse-tls``, or None.
    sim_address : host:port of the simulation SuperLink (``fedsparse-sim``).

    Returns
    -------
    dict
        ``{"superlink": {name: connection}}``, ready for :func:`merge_flower_config`.
    """
    tls = {"address": address}
    if root_certificates:
        tls["root-certificates"] = root_certificates
    return {"superlink": {
        "fedsparse-local": {"address": address, "insecure": True},
        "fedsparse-tls": tls,
        "fedsparse-sim": {"address": sim_address, "insecure": True},
    }}


def merge_flower_config(flwr_home: str | Path, extra: dict) -> Path:
    """Merge ``extra``'s ``[superlink.*]`` connections into ``FLWR_HOME/config.toml``.

    Parameters
    ----------
    flwr_home : Flower home directory (created if missing).
    extra : ``{"superlink": {...}}``, as :func:`connections` returns.

    Returns
    -------
    Path
        The written ``config.toml``; ``superlink.default`` is set to ``fedsparse-local``
        unless it already had a value.
    """
    path = Path(flwr_home) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    current: dict = {}
    if path.exists():
        with open(path, "rb") as fh:
            current = tomllib.load(fh)
    links = current.setdefault("superlink", {})
    links.update(extra["superlink"])
    links.setdefault("default", "fedsparse-local")
    path.write_text(tomli_w.dumps(current))
    return path


def write_app_project(config: dict | Job, out: str | Path, *, run: str | int | None = None,
                      name: str | None = None, address: str = "127.0.0.1:9093",
                      root_certificates: str | None = None, flwr_home: str | Path | None = None,
                      sim_address: str = "127.0.0.1:9092", overwrite: bool = False) -> Path:
    """Write a Flower app project for a fedsparse job.

    Parameters
    ----------
    config : a job dict, an experiment config (``run`` picks the run) or a Job.
    out : directory to write (created; must be empty unless ``overwrite``).
    name : project name (default from the algorithm and data).
    address : SuperLink address for the deployment connections (host:port).
    root_certificates : CA certificate for the TLS connection (path).
    sim_address : address of a SuperLink started with ``--simulation`` (``fedsparse-sim``).
    flwr_home : if given, merge the connections into ``flwr_home/config.toml``.
    overwrite : allow writing into a non-empty directory.

    Returns
    -------
    The project directory.
    """
    job = config if isinstance(config, Job) else job_from_config(config, run)
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"out={str(out)!r} is not empty; choose a new directory or pass "
                          "overwrite=True (--force)")
    if ":" not in address:
        raise ConfigError(f"address={address!r} is invalid: must be host:port")
    port = address.rsplit(":", 1)[1]
    if not port.isdigit():
        raise ConfigError(f"address={address!r} is invalid: the port {port!r} must be a number")
    check_int("address port", int(port), minimum=1, maximum=65535)
    if root_certificates is not None and not Path(root_certificates).is_file():
        raise ConfigError(f"root_certificates={str(root_certificates)!r} is invalid: no such "
                          "file (give the CA certificate in PEM, e.g. deploy/certificates/ca.crt)")
    name = _slug(name or f"fedsparse-{job.algorithm['kind']}")
    (out / PACKAGE).mkdir(parents=True, exist_ok=True)
    (out / PACKAGE / "__init__.py").write_text(f'"""Flower app of the fedsparse job {name}."""\n')
    (out / PACKAGE / "server_app.py").write_text(
        _MODULE.format(what="The ServerApp", module="server_app"))
    (out / PACKAGE / "client_app.py").write_text(
        _MODULE.format(what="The ClientApp", module="client_app"))
    pyproject = {
        "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
        "project": {"name": name, "version": "1.0.0",
                    "description": f"fedsparse job {name} on Flower",
                    "license": "Apache-2.0",
                    "dependencies": ["fedsparse[flower]"]},
        "tool": {"hatch": {"build": {"targets": {"wheel": {"packages": ["."]}}}},
                 "flwr": {"app": {
                     "publisher": "fedsparse",
                     "components": {"serverapp": f"{PACKAGE}.server_app:app",
                                    "clientapp": f"{PACKAGE}.client_app:app"},
                     "config": job_to_run_config(job)}}},
    }
    (out / "pyproject.toml").write_text(tomli_w.dumps(pyproject))
    links = connections(address=address, root_certificates=root_certificates,
                        sim_address=sim_address)
    (out / "flower-config.toml").write_text(
        "# SuperLink connections for this job: merge into $FLWR_HOME/config.toml\n"
        + tomli_w.dumps(links))
    (out / "README.md").write_text(_README.format(name=name, num_clients=job.num_clients,
                                                  last=job.num_clients - 1, address=address))
    if flwr_home is not None:
        merge_flower_config(flwr_home, links)
    return out
