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
home directly (``flwr_home=``): only into a ``config.toml`` that is Flower's (it has a
``[superlink]`` table, or is new or empty), keeping the earlier file as a backup.

The project folder gets a manifest (:mod:`fedsparse.manifest`) of the files written, so
``overwrite`` (``--force``) rewrites only those, and only while unchanged: a README or
pyproject.toml the user wrote or edited is never overwritten, and other files in the
folder (node data, notes) stay.
"""

from __future__ import annotations

import datetime
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import tomli_w

from .._validation import ConfigError, check_int, fail
from ..manifest import (
    colliding,
    describe,
    inventory,
    read_manifest,
    record_files,
    remove_ours,
    start_manifest,
)
from .job import Job, job_from_config, job_to_run_config

PACKAGE = "fedsparse_app"
#: The files of an app project, relative to its folder.
PROJECT_FILES = ("pyproject.toml", "flower-config.toml", "README.md", f"{PACKAGE}/__init__.py",
                 f"{PACKAGE}/server_app.py", f"{PACKAGE}/client_app.py")

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


def _check_address(name: str, address) -> None:
    """A SuperLink address: ``host:port`` (``[::1]:9093`` for IPv6) with a host and a
    port in 1..65535."""
    if not isinstance(address, str) or ":" not in address:
        raise fail(name, address, "must be host:port, e.g. 127.0.0.1:9093")
    host, port = address.rsplit(":", 1)
    if not host.strip("[]").strip():
        raise fail(name, address, "names no host: give host:port, e.g. 127.0.0.1:9093")
    if not port.isdigit():
        raise fail(name, address, f"the port {port!r} must be a number")
    check_int(f"{name} port", int(port), minimum=1, maximum=65535)


def _checked_certificate(name: str, path) -> str:
    """The absolute path of a CA certificate file in PEM (Flower reads it when a run is
    submitted, from wherever ``flwr run`` is started)."""
    pem = Path(path).expanduser()
    if not pem.is_file():
        raise fail(name, str(path), "no such file (give the CA certificate in PEM, e.g. "
                   "deploy/certificates/ca.crt)")
    with open(pem, "rb") as fh:
        head = fh.read(1 << 16)
    if b"-----BEGIN CERTIFICATE-----" not in head:
        raise fail(name, str(path), "is not a PEM certificate (no -----BEGIN CERTIFICATE----- "
                   f"line in {'an empty file' if not head else 'its first 64 KiB'})")
    return str(pem.absolute())


def read_flower_config(flwr_home: str | Path, option: str = "flwr_home") -> dict:
    """The Flower configuration ``FLWR_HOME/config.toml`` as a dict ({} when there is none).

    Raises
    ------
    ConfigError
        naming ``option`` when the file exists and is not Flower's: not TOML, or without
        the ``[superlink]`` table Flower keeps its connections in (an unrelated
        ``config.toml`` is never edited).
    """
    home = Path(flwr_home).expanduser()
    path = home / "config.toml"
    if home.exists() and not home.is_dir():
        raise ConfigError(f"{option}={str(home)!r} is invalid: it is a file; give Flower's "
                          "home directory (FLWR_HOME)")
    if not path.exists():
        return {}
    try:
        current = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
        raise ConfigError(f"{option}={str(home)!r} is invalid: {str(path)!r} is not a Flower "
                          f"configuration ({exc}); nothing was changed: give Flower's home "
                          "directory (FLWR_HOME)") from None
    if current and not isinstance(current.get("superlink"), dict):
        raise ConfigError(f"{option}={str(home)!r} is invalid: {str(path)!r} is not a Flower "
                          f"configuration (no [superlink] table; it has "
                          f"{', '.join(sorted(current))}); nothing was changed: give Flower's "
                          "home directory (FLWR_HOME)")
    return current


def merge_flower_config(flwr_home: str | Path, extra: dict,
                        option: str = "flwr_home") -> tuple[Path, Path | None]:
    """Merge ``extra``'s ``[superlink.*]`` connections into ``FLWR_HOME/config.toml``.

    Parameters
    ----------
    flwr_home : Flower home directory (created if missing).
    extra : ``{"superlink": {...}}``, as :func:`connections` returns.
    option : the name the errors give ``flwr_home`` (the command line: --flwr-home).

    Returns
    -------
    (Path, Path or None)
        The written ``config.toml`` and the backup of the file it replaced
        (``config.toml.<time>.bak``; None when there was none or nothing changed).
        ``superlink.default`` is set to ``fedsparse-local`` unless it already had a value.

    Raises
    ------
    ConfigError
        for a ``config.toml`` that is not Flower's (:func:`read_flower_config`).
    """
    current = read_flower_config(flwr_home, option)
    path = Path(flwr_home).expanduser() / "config.toml"
    merged = {**current, "superlink": {**current.get("superlink", {}), **extra["superlink"]}}
    merged["superlink"].setdefault("default", "fedsparse-local")
    if path.exists() and merged == current:
        return path, None
    backup = None
    if path.exists():
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        backup = path.with_name(f"config.toml.{stamp}.bak")
        backup.write_bytes(path.read_bytes())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(merged))
    return path, backup


def prepare_project_dir(out: Path, overwrite: bool, option: str = "overwrite=True",
                        files=PROJECT_FILES) -> list[str]:
    """Make ``out`` ready for generated ``files``; returns what it keeps of the user's.

    A new or empty folder is used as is. A non-empty one needs ``overwrite`` and a
    manifest: the generated files it lists (unchanged) are removed, everything else stays;
    a kept file where a generated one goes is refused before anything is removed.

    Raises
    ------
    ConfigError
        naming ``option`` (the command line says --force).
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out={str(out)!r} is a file; give a directory")
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir()
                     if not p.name.startswith(".fedsparse-")) if out.is_dir() else []
    if not entries:
        return []
    if not overwrite:
        raise ConfigError(f"out={str(out)!r} is not empty ({describe(entries)}); choose a new "
                          f"directory or pass {option} to replace what fedsparse wrote there")
    manifest = read_manifest(out)
    if manifest is None:
        raise ConfigError(f"out={str(out)!r} holds files fedsparse did not write "
                          f"({describe(entries)}) and no manifest of files it wrote: {option} "
                          "only replaces files fedsparse wrote; nothing was changed: choose a "
                          "new directory")
    inv = inventory(out, manifest)
    blocked = colliding(inv.kept, files)
    if blocked:
        changed = set(inv.changed)
        what = describe([p + (" (changed since fedsparse wrote it)" if p in changed else
                              " (not written by fedsparse)") for p in blocked])
        raise ConfigError(f"out={str(out)!r}: {option} would overwrite {what}; nothing was "
                          "changed: move them away or choose a new directory")
    remove_ours(out, inv)
    return inv.kept


def write_app_project(config: dict | Job, out: str | Path, *, run: str | int | None = None,
                      name: str | None = None, address: str = "127.0.0.1:9093",
                      root_certificates: str | None = None, flwr_home: str | Path | None = None,
                      sim_address: str = "127.0.0.1:9092", overwrite: bool = False,
                      log: Callable[[str], None] | None = None, cli: bool = False) -> Path:
    """Write a Flower app project for a fedsparse job.

    Parameters
    ----------
    config : a job dict, an experiment config (``run`` picks the run) or a Job.
    out : directory to write (created; must be empty unless ``overwrite``).
    name : project name (default from the algorithm and data).
    address : SuperLink address for the deployment connections (host:port).
    root_certificates : CA certificate for the TLS connection (path).
    sim_address : address of a SuperLink started with ``--simulation`` (``fedsparse-sim``).
    flwr_home : if given, merge the connections into ``flwr_home/config.toml`` (only a
        Flower configuration; the earlier file is kept as a backup).
    overwrite : replace an earlier project fedsparse wrote in ``out`` (:func:`prepare_project_dir`:
        only its own unchanged files; other files stay).
    log : called with a line saying what was kept and where a backup went.
    cli : errors name the command line's flags (--force, --flwr-home) rather than these
        arguments (overwrite=True, flwr_home).

    Returns
    -------
    The project directory.
    """
    job = config if isinstance(config, Job) else job_from_config(config, run)
    run_config = job_to_run_config(job)  # before anything is written: refuses lists
    out = Path(out)
    say = log or (lambda line: None)
    force, home = ("--force", "--flwr-home") if cli else ("overwrite=True", "flwr_home")
    if flwr_home is not None:  # before anything is written
        read_flower_config(flwr_home, home)
    names = ("--address", "--sim-address", "--root-certificates") if cli else \
        ("address", "sim_address", "root_certificates")
    _check_address(names[0], address)
    _check_address(names[1], sim_address)
    if root_certificates is not None:
        root_certificates = _checked_certificate(names[2], root_certificates)
    if name is not None and not (isinstance(name, str) and name.strip()):
        raise fail("--name" if cli else "name", name, "must be a non-empty project name")
    given, name = name, _slug(name or f"fedsparse-{job.algorithm['kind']}")
    if given is not None and given != name:
        say(f"the project name {given!r} is written {name!r}: a Flower app name starts with "
            "a letter and has letters, digits and hyphens, at most 32")
    created = not out.exists()
    kept = prepare_project_dir(out, overwrite, force)
    if kept:
        say(f"kept in {out} what fedsparse did not write: {describe(kept)}")
    (out / PACKAGE).mkdir(parents=True, exist_ok=True)
    start_manifest(out, folder_created=created)
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
                     "config": run_config}}},
    }
    (out / "pyproject.toml").write_text(tomli_w.dumps(pyproject))
    links = connections(address=address, root_certificates=root_certificates,
                        sim_address=sim_address)
    (out / "flower-config.toml").write_text(
        "# SuperLink connections for this job: merge into $FLWR_HOME/config.toml\n"
        + tomli_w.dumps(links))
    (out / "README.md").write_text(_README.format(name=name, num_clients=job.num_clients,
                                                  last=job.num_clients - 1, address=address))
    record_files(out, PROJECT_FILES)
    if flwr_home is not None:
        path, backup = merge_flower_config(flwr_home, links, home)
        say(f"merged the SuperLink connections into {path}"
            + (f" (the earlier file is kept as {backup})" if backup else ""))
    return out
