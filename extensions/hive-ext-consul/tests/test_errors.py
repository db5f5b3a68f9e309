"""What Consul's failures say in the log: in Consul's terms, naming the agent."""

from __future__ import annotations

import subprocess
import sys

import consul
import pytest
import requests

from hive_ext_consul._agent import describe

URL = "https://127.0.0.1:8501"


@pytest.mark.parametrize(("error", "said"), [
    (consul.ACLPermissionDenied("Permission denied"),
     "permission denied (Permission denied): check consul-acl-token and its policy"),
    (consul.ConsulException("500 No path to datacenter"),
     "the agent answered 500 No path to datacenter"),
    (consul.ConsulException("Failed to decode JSON: <html>"),
     f"the answer of {URL} is not Consul's (not JSON)"),
    (requests.exceptions.SSLError("certificate verify failed"),
     f"TLS with {URL} failed: certificate verify failed"),
    (requests.exceptions.ReadTimeout("read timed out"), f"{URL} did not answer within 2 s"),
    (requests.exceptions.ConnectionError("refused"), f"cannot reach Consul at {URL}: refused"),
    (KeyError("X-Consul-Index"), f"the answer of {URL} is not Consul's (KeyError"),
    (RuntimeError("odd"), "RuntimeError: odd"),
])
def test_failures_are_described_in_consuls_terms(error: Exception, said: str) -> None:
    assert describe(error, URL).startswith(said)


def test_without_py_consul_the_import_names_the_distribution() -> None:
    """Hive's `hive extensions` shows the ImportError's name as what to pip install."""
    hide = ("import importlib.metadata as m; real = m.version\n"
            "def version(name):\n"
            "    if name == 'py-consul': raise m.PackageNotFoundError(name)\n"
            "    return real(name)\n"
            "m.version = version\n"
            "try:\n"
            "    import hive_ext_consul\n"
            "except ImportError as exc:\n"
            "    print(exc.name, '|', exc)\n")
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.startswith("py-consul | hive-ext-consul needs the distribution py-consul "
                                  "(pip install py-consul; not python-consul")
