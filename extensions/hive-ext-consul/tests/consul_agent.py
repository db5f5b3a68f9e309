"""A real Consul agent in dev mode on loopback, every port picked free, stopped by its PID.

The binary is Consul 1.8.7 from Debian bullseye, which ``scripts/testbed/consul.sh`` puts in the
repository's ``.tools/bin`` (or ``$HIVE_CONSUL_BINARY``, or ``consul`` on PATH). A dev agent
keeps its catalog in memory: stopping it and starting it again on the same ports is an outage
that also loses every registration, which the nodes must then make again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import consul

TOOLS_BINARY = Path(__file__).resolve().parents[3] / ".tools" / "bin" / "consul"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def consul_binary() -> str:
    configured = os.environ.get("HIVE_CONSUL_BINARY")
    if configured:
        return configured
    if TOOLS_BINARY.exists():
        return str(TOOLS_BINARY)
    found = shutil.which("consul")
    if found is None:
        raise RuntimeError("no consul binary: run scripts/testbed/consul.sh (it puts Consul "
                           "1.8.7 in .tools/bin), or set HIVE_CONSUL_BINARY")
    return found


@dataclass(frozen=True)
class AgentTls:
    """The agent's HTTPS listener: its certificate, and the CA that client certificates need."""

    ca_file: Path
    cert_file: Path
    key_file: Path


class ConsulAgent:
    def __init__(self, folder: Path, tls: AgentTls | None = None,
                 acl_master_token: str | None = None) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.tls = tls
        self.acl_master_token = acl_master_token
        names = ("http", "dns", "serf_lan", "serf_wan", "server", "grpc", "https")
        self.ports = {name: free_port() for name in names}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}"

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['https']}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _config(self) -> Path:
        """The settings beyond the command line's: HTTPS and ACLs."""
        settings: dict[str, object] = {}
        if self.tls is not None:
            settings.update(ca_file=str(self.tls.ca_file), cert_file=str(self.tls.cert_file),
                            key_file=str(self.tls.key_file), verify_incoming_https=True,
                            ports={"https": self.ports["https"]})
        if self.acl_master_token is not None:
            settings["acl"] = {"enabled": True, "default_policy": "deny",
                               "tokens": {"master": self.acl_master_token}}
        path = self.folder / "agent.json"
        path.write_text(json.dumps(settings))
        return path

    def start(self, timeout: float = 20.0) -> ConsulAgent:
        p = self.ports
        with (self.folder / "consul.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [consul_binary(), "agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
                 "-http-port", str(p["http"]), "-dns-port", str(p["dns"]),
                 "-serf-lan-port", str(p["serf_lan"]), "-serf-wan-port", str(p["serf_wan"]),
                 "-server-port", str(p["server"]), "-grpc-port", str(p["grpc"]),
                 "-config-file", str(self._config()), "-log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"consul exited: {(self.folder / 'consul.log').read_text()}")
            if self._leader():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"consul elected no leader within {timeout} s")

    def _leader(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/v1/status/leader", timeout=1) as answer:
                return bool(json.load(answer))
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def client(self) -> consul.Consul:
        return consul.Consul(host="127.0.0.1", port=self.ports["http"],
                             token=self.acl_master_token)

    def properties(self, service: str, **overrides: str | None) -> str:
        """A ``consuldiscovery.properties`` for this agent (``_`` for ``-``; None leaves a key
        out)."""
        settings: dict[str, str | None] = {"consul-url": self.url,
                                           "consul-service-name": service}
        for key, value in overrides.items():
            settings[key.replace("_", "-")] = value
        return "".join(f"{key}:{value}\n" for key, value in settings.items() if value is not None)
