"""`pip install --find-links dist/wheelhouse hive-ext-s3`, as the README says, really works.

scripts/wheelhouse.sh builds every distribution of the repository; a plain new virtualenv with
only hive-broker from that wheelhouse then takes each discovery extension by name (S3, Consul,
Docker: the three README-documented installs), and its `hive extensions` lists them. Installing
reaches the package index for the dependencies (boto3, py-consul, docker, pydantic, ...), as a
user's install does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_FOLDERS = {"build", "dist", "node_modules"}

pytestmark = pytest.mark.timeout(600)

DISCOVERY_PACKAGES = ("hive-ext-s3", "hive-ext-consul", "hive-ext-docker")


def _projects() -> dict[str, Path]:
    """Every distribution of the repository, by normalized name (as the script finds them)."""
    found = {}
    for path in sorted(ROOT.rglob("pyproject.toml")):
        relative = path.relative_to(ROOT).parts[:-1]
        if any(part.startswith(".") or part in SKIPPED_FOLDERS for part in relative):
            continue
        name = tomllib.loads(path.read_text())["project"]["name"]
        found[re.sub(r"[-_.]+", "_", name).lower()] = path.parent
    return found


def _run(args: list[str], env: dict[str, str] | None = None,
         quiet_build: bool = False) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=480, env=env)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    if quiet_build:  # e.g. setuptools' "`project.license` as a TOML table is deprecated"
        assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    return done.stdout


def test_every_distribution_declares_its_license_as_an_spdx_expression() -> None:
    """PEP 639: a TOML table makes setuptools warn twice per build (about 20 copies from
    wheelhouse.sh); the string needs setuptools 77."""
    for name, folder in _projects().items():
        project = tomllib.loads((folder / "pyproject.toml").read_text())
        assert project["project"]["license"] == "Apache-2.0", name
        requires = project["build-system"]["requires"]
        assert "setuptools>=77" in requires, (name, requires)


@pytest.mark.slow  # a minute of building every distribution; tox runs it, CI does not
def test_every_distribution_is_built_and_an_extension_installs_by_name(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    env = {**os.environ, "PYTHON": sys.executable}
    _run(["bash", str(ROOT / "scripts" / "wheelhouse.sh"), str(wheelhouse)], env=env,
         quiet_build=True)

    projects = _projects()
    assert {"hive_broker", "hive_ext_s3", "hive_ext_consul", "hive_ext_docker"} <= set(projects)
    built = {wheel.name.split("-")[0].lower() for wheel in wheelhouse.glob("*.whl")}
    assert built == set(projects), f"projects {sorted(projects)}, wheels {sorted(built)}"

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python, hive = venv / "bin" / "python", venv / "bin" / "hive"
    clean = {key: value for key, value in os.environ.items()
             if key not in ("PYTHONPATH", "VIRTUAL_ENV", "HIVE_DISABLED_EXTENSIONS")}
    pip = [str(python), "-m", "pip", "install", "--quiet", "--find-links", str(wheelhouse)]
    _run([*pip, "hive-broker"], env=clean)
    listed = _run([str(hive), "extensions"], env=clean)
    assert "s3-discovery" not in listed

    for package in DISCOVERY_PACKAGES:  # the README's line, once for each
        _run([*pip, package], env=clean)
    listed = _run([str(hive), "extensions"], env=clean)
    rows = {line.split()[0]: line.split()[1:3] for line in listed.splitlines()[2:] if line}
    for name in ("s3-discovery", "consul-discovery", "docker-discovery"):
        assert rows[name] == ["1.0.0", "yes"], listed
    where = _run([str(python), "-I", "-c", "import hive_core, hive_ext_s3, hive_ext_consul, "
                  "hive_ext_docker as d; print(hive_core.__file__); print(d.__file__)"], env=clean)
    assert all(str(venv) in line and "site-packages" in line for line in where.split())
    # each wheel holds its sources only (nothing an earlier build left behind)
    for wheel in wheelhouse.glob("hive_ext_*.whl"):
        package = wheel.name.split("-")[0]
        source = projects[package] / "src" / package
        if source.is_dir():
            with zipfile.ZipFile(wheel) as archive:
                packed = {Path(n).name for n in archive.namelist() if n.startswith(package + "/")}
            assert packed == {p.name for p in source.iterdir() if p.is_file()}, wheel.name
