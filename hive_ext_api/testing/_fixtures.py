"""The fixtures of a discovery extension's conftest, made for its name and its service."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest


class Service(Protocol):
    """A service a discovery extension's tests run (a server, an agent), which a test may take
    down; started again, it answers on the same address."""

    @property
    def running(self) -> bool:
        """Whether it is up."""
        ...

    def start(self) -> object:
        """Up (again), on its address."""
        ...

    def stop(self) -> None:
        """Down: its address refuses connections."""
        ...


ServiceT = TypeVar("ServiceT", bound=Service)


def extension_fixtures(name: str) -> tuple[Any, Any]:
    """``only_this_extension, anyio_backend = extension_fixtures("my-discovery")`` in a conftest:

    - ``only_this_extension`` (autouse): of the extensions installed beside this one (a test
      matrix installs several), none gets into the nodes the tests start, in-process or
      `hive run` (hive-broker's ``hive_only_installed``);
    - ``anyio_backend``: the async tests' loop, asyncio, as the node's.
    """

    @pytest.fixture(autouse=True)
    def only_this_extension(hive_only_installed: Callable[..., None]) -> None:
        hive_only_installed(name)

    @pytest.fixture
    def anyio_backend() -> str:
        return "asyncio"

    return only_this_extension, anyio_backend


def service_fixtures(name: str, make: Callable[[Path], ServiceT],
                     each_test: Callable[[ServiceT], object] | None = None) -> tuple[Any, Any]:
    """``agent_session, agent = service_fixtures("agent", ConsulAgent)`` in a conftest:

    - ``<name>_session`` (session scope): ``make(folder)`` (a temporary folder of its own),
      started once and stopped at the end;
    - ``<name>``: the same service for a test, running (started again when an earlier test took
      it down), and given to ``each_test`` first (to empty it, say).
    """

    @pytest.fixture(scope="session", name=f"{name}_session")
    def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceT]:
        service = make(tmp_path_factory.mktemp(name))
        service.start()
        yield service
        service.stop()

    @pytest.fixture(name=name)
    def for_a_test(request: pytest.FixtureRequest) -> ServiceT:
        service: ServiceT = request.getfixturevalue(f"{name}_session")
        if not service.running:
            service.start()
        if each_test is not None:
            each_test(service)
        return service

    return session, for_a_test
