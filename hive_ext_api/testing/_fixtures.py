"""The fixtures of a discovery extension's conftest, made for its name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


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
