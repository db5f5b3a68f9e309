"""Fixtures: one private dockerd and one image per test session; networks, containers and
dnsmasq per test. Each is stopped or removed by the fixture that made it, even on failure."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
from hive_ext_api import ExtensionContext

from _testbed import (
    BridgeNetwork,
    Containers,
    Dnsmasq,
    Dockerd,
    make_tls_files,
    root_filesystem_tar,
)

IMAGE = "hive-test-root:1"


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dockerd]:
    """The daemon on a unix socket, and over TLS on a TCP port of 127.0.0.1."""
    daemon = Dockerd(tmp_path_factory.mktemp("dockerd"),
                     tls_dir=make_tls_files(tmp_path_factory.mktemp("docker-tls")))
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.cleanup()


@pytest.fixture(scope="session")
def node_image(dockerd: Dockerd) -> str:
    """An image of an empty root: the containers bind the host's /usr and this Python in."""
    with contextlib.closing(dockerd.client()) as client:
        client.import_image_from_data(root_filesystem_tar(), repository=IMAGE.split(":")[0],
                                      tag=IMAGE.split(":")[1])
    return IMAGE


@pytest.fixture
def docker_client(dockerd: Dockerd) -> Iterator[docker.APIClient]:
    with contextlib.closing(dockerd.client()) as client:
        yield client


@pytest.fixture
def network(docker_client: docker.APIClient) -> Iterator[BridgeNetwork]:
    made = BridgeNetwork(docker_client)
    try:
        yield made
    finally:
        made.remove()


@pytest.fixture
def containers(docker_client: docker.APIClient, node_image: str,
               network: BridgeNetwork) -> Iterator[Containers]:
    made = Containers(docker_client, node_image)
    try:
        yield made
    finally:
        made.remove_all()


@pytest.fixture
def dnsmasq(tmp_path: Path) -> Iterator[Dnsmasq]:
    server = Dnsmasq(tmp_path / "dnsmasq")
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def extension_context(tmp_path: Path) -> ExtensionContext:
    """What the node hands the extension at start, without a node (services: none)."""
    return ExtensionContext(name="docker-discovery", data_dir=tmp_path / "ext-data",
                            services=None,  # type: ignore[arg-type]
                            log=logging.getLogger("hive.ext.docker-discovery"))


@pytest.fixture(autouse=True)
def only_this_extension(hive_only_installed: Callable[..., None]) -> None:
    """Other installed extensions (the tox matrix installs the discovery extensions side by
    side) stay out of the nodes these tests start: in-process, `hive run`, in containers."""
    hive_only_installed("docker-discovery")


@pytest.fixture(autouse=True)
def _no_settings_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own HIVE_DOCKER_DISCOVERY_* or DOCKER_* must not leak into a test."""
    import os

    for name in list(os.environ):
        if name.startswith(("HIVE_DOCKER_DISCOVERY_", "DOCKER_")):
            monkeypatch.delenv(name)
