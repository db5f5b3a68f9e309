"""A private Docker engine for the container tests, and the base images it cannot pull.

No registry is reachable here, so the two base images the Dockerfile and the compose file name
(a Python image and HAProxy's) are made locally, as ``docker import`` of a root file system:
this interpreter's installation under /usr/local (where the official Python images have theirs)
and the host's HAProxy under /usr/local/sbin (as in HAProxy's images), each with exactly the
shared libraries ``ldd`` says they load, and a shell with the few tools a Dockerfile's RUN uses.
Everything else, the build of Hive's image and the cluster, goes through ``docker build`` and
``docker-compose`` as a user runs them.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_HINT = "run scripts/testbed/container.sh (Debian docker.io, docker-compose, and wheels)"
DOCKER = "/usr/bin/docker"  # Debian's client, matching its dockerd (another may come first)
COMPOSE = "/usr/bin/docker-compose"
# What a Dockerfile's shell-form RUN of ours calls besides Python (the official images have them).
SHELL_TOOLS = ("dash", "mkdir", "chown", "cat", "ls", "rm", "id", "env", "echo", "sleep")


def wait_for(check: Callable[[], bool], timeout: float, what: str, every: float = 0.2) -> float:
    """Poll ``check`` until true; the seconds it took. Fails naming ``what`` after ``timeout``."""
    begun = time.monotonic()
    last: Exception | None = None
    while time.monotonic() - begun < timeout:
        try:
            if check():
                return time.monotonic() - begun
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            last = exc
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {what}"
                         + (f" (last: {last!r})" if last is not None else ""))


def _unused_network(prefix: int) -> ipaddress.IPv4Network:
    """A 10.x network of ``prefix`` bits that no interface or route here overlaps."""
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True,
                            text=True, check=False).stdout
    used = [ipaddress.ip_network(m, strict=False)
            for m in re.findall(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", routes)]
    for _ in range(200):
        candidate = ipaddress.ip_network(f"10.{random.randint(128, 254)}.0.0/{prefix}",
                                         strict=False)
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise RuntimeError(f"no free /{prefix} in 10.128.0.0/9 for the engine's networks")


class Engine:
    """dockerd with its own data, exec root, socket and address pool, stopped by PID.

    ``--bridge=none``: no docker0; compose makes its own network, from a pool no other network
    here uses. ``--iptables=false``: the machine's rules stay as they are; published ports go
    through docker-proxy.
    """

    def __init__(self, log_dir: Path) -> None:
        for tool in ("/usr/sbin/dockerd", DOCKER, COMPOSE):
            if not Path(tool).exists():
                raise RuntimeError(f"{tool} is missing: {INSTALL_HINT}")
        self.root = Path(tempfile.mkdtemp(prefix="hct-", dir="/tmp"))  # socket paths are short
        self.socket = self.root / "docker.sock"
        self.log_path = log_dir / "dockerd.log"
        self.pool = _unused_network(16)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """An environment for the docker and docker-compose clients of this daemon."""
        return {"PATH": SYSTEM_PATH, "HOME": os.environ.get("HOME", "/root"),
                "DOCKER_HOST": f"unix://{self.socket}", "COMPOSE_INTERACTIVE_NO_CLI": "1"}

    def start(self, timeout: float = 60.0) -> Engine:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                ["/usr/sbin/dockerd", "--data-root", str(self.root / "data"),
                 "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "pid"),
                 "-H", f"unix://{self.socket}", "--iptables=false", "--ip-masq=false",
                 "--bridge=none", "--default-address-pool", f"base={self.pool},size=24"],
                stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PATH": f"{SYSTEM_PATH}:{os.environ.get('PATH', '')}"})
        try:
            wait_for(lambda: self.docker("version", check=False).returncode == 0, timeout,
                     "dockerd answers on its socket")
        except AssertionError as exc:
            self.stop()
            raise RuntimeError(f"dockerd did not start:\n{self.log_path.read_text()[-3000:]}") \
                from exc
        return self

    def docker(self, *args: str, check: bool = True, input: bytes | None = None,
               timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([DOCKER, *args], env=self.env, capture_output=True, input=input,
                              timeout=timeout, check=False)
        result = subprocess.CompletedProcess(done.args, done.returncode,
                                             done.stdout.decode(errors="replace"),
                                             done.stderr.decode(errors="replace"))
        if check and result.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    def logs(self, container: str) -> str:
        """A container's output, both streams (the node logs to standard error)."""
        done = self.docker("logs", container)
        return done.stdout + done.stderr

    def compose(self, compose_file: Path, project: str, *args: str, env: dict[str, str],
                check: bool = True, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([COMPOSE, "--ansi", "never", "-f", str(compose_file), "-p", project,
                               *args], env={**self.env, **env}, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)} failed ({done.returncode}):"
                                 f"\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
        return done

    def import_root(self, tag: str, root: bytes, changes: Iterable[str]) -> str:
        flags = [item for change in changes for item in ("--change", change)]
        self.docker("import", *flags, "-", tag, input=root)
        return tag

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def cleanup(self) -> None:
        """Containers, networks and volumes gone, the daemon stopped, its folder removed."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                ids = self.docker("ps", "-aq", check=False).stdout.split()
                if ids:
                    self.docker("rm", "-f", "-v", *ids, check=False)
                self.docker("network", "prune", "-f", check=False)
                self.docker("volume", "prune", "-f", check=False)
        finally:
            self.stop()
            pid_file = self.root / "exec" / "containerd" / "containerd.pid"
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                      if str(self.root) in line.split()[1]]
            for target in sorted(mounts, key=len, reverse=True):
                subprocess.run(["umount", "-l", target], check=False, capture_output=True)
            shutil.rmtree(self.root, ignore_errors=True)


# ------------------------------------------------------------------------- root file systems


def shared_libraries(files: Iterable[str]) -> set[str]:
    """The shared libraries ``ldd`` resolves for ``files`` (the dynamic loader included)."""
    found: set[str] = set()
    for path in files:
        out = subprocess.run(["ldd", path], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            match = re.search(r"(?:=>\s+)?(/\S+)\s+\(0x", line)
            if match:
                found.add(match.group(1))
    return found


class RootFs:
    """A root file system as a tar in memory: merged /usr, the usual folders, root's entries."""

    def __init__(self) -> None:
        self._buffer = io.BytesIO()
        self._tar = tarfile.open(fileobj=self._buffer, mode="w")  # noqa: SIM115 (closed in bytes())
        self._names: set[str] = set()
        for folder in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "root", "run",
                       "var/lib", "proc", "sys", "dev"):
            self.folder(folder)
        self.folder("tmp", mode=0o1777)
        for link in ("bin", "sbin", "lib", "lib64"):
            self.symlink(link, f"usr/{link}")
        self.text("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
        self.text("etc/group", "root:x:0:\n")

    def folder(self, name: str, mode: int = 0o755) -> None:
        parts = Path(name).parts
        for depth in range(1, len(parts) + 1):
            path = "/".join(parts[:depth])
            if path not in self._names:
                info = tarfile.TarInfo(path)
                info.type, info.mode = tarfile.DIRTYPE, mode if depth == len(parts) else 0o755
                self._tar.addfile(info)
                self._names.add(path)

    def symlink(self, name: str, target: str) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = tarfile.SYMTYPE, target
        self._tar.addfile(info)
        self._names.add(name)

    def text(self, name: str, content: str) -> None:
        data = content.encode()
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        self._tar.addfile(info, io.BytesIO(data))
        self._names.add(name)

    def file(self, source: str | Path, name: str | None = None) -> None:
        """A host file (symbolic links followed) at ``name`` (default: its own path)."""
        name = (name or str(source)).lstrip("/")
        name = re.sub(r"^(bin|sbin|lib|lib64)/", r"usr/\1/", name)  # merged /usr
        if name in self._names:
            return
        self.folder(str(Path(name).parent))
        self._tar.add(os.path.realpath(source), arcname=name, recursive=False)
        self._names.add(name)

    def tree(self, source: Path, name: str, skip: Callable[[Path], bool]) -> None:
        """A host folder's content under ``name``; links inside it are kept as links."""
        def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            if skip(Path(info.name).relative_to(name)) or info.name in self._names:
                return None  # (a folder made already would be written twice: none are)
            self._names.add(info.name)
            return info

        self.folder(name)
        for child in sorted(source.iterdir()):
            self._tar.add(child, arcname=f"{name}/{child.name}", filter=keep)

    def bytes(self) -> bytes:
        self._tar.close()
        return self._buffer.getvalue()


def _skip_in_python_home(relative: Path) -> bool:
    """What the official images leave out too, or what a server never uses."""
    parts = relative.parts
    if "__pycache__" in parts or relative.suffix == ".a":
        return True
    if len(parts) >= 3 and parts[0] == "lib" and parts[1].startswith("python3"):
        return parts[2] in ("test", "idlelib", "tkinter", "turtledemo", "site-packages")
    if len(parts) >= 2 and parts[0] == "bin":  # the interpreter; not the scripts pip put there
        return not parts[1].startswith("python")
    return len(parts) >= 1 and parts[0] in ("include", "share")


def python_root() -> bytes:
    """This interpreter's installation as /usr/local, like the official Python images."""
    home = Path(sys.base_prefix)
    root = RootFs()
    root.tree(home, "usr/local", _skip_in_python_home)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    root.folder(f"usr/local/lib/python{version}/site-packages")
    modules = [str(p) for p in (home / "lib" / f"python{version}" / "lib-dynload").glob("*.so")]
    tools = [shutil.which(t, path=SYSTEM_PATH) for t in SHELL_TOOLS]
    binaries = [str(home / "bin" / f"python{version}"),
                *[t for t in tools if t is not None]]
    for tool in tools:
        if tool is not None:
            root.file(tool, f"usr/bin/{Path(tool).name}")
    root.symlink("usr/bin/sh", "dash")
    for library in shared_libraries([*binaries, *modules, *_wheel_modules()]):
        if not library.startswith(str(home)):
            root.file(library)
    return root.bytes()


def _wheel_modules() -> list[str]:
    """The compiled modules of hive-broker's dependencies here (and theirs): the libraries they
    load (glibc's, libgcc's) must be in the base, as they are in a Debian-based Python image."""
    seen: set[str] = set()
    waiting = ["hive-broker"]
    modules: list[str] = []
    while waiting:
        name = waiting.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a dependency for another platform
        modules += [str(dist.locate_file(f)) for f in dist.files or () if f.suffix == ".so"]
        waiting += [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in dist.requires or ()
                    if "extra ==" not in r]
    return modules


def haproxy_root(haproxy: str = "/usr/sbin/haproxy") -> bytes:
    """The host's HAProxy at /usr/local/sbin/haproxy, as in HAProxy's own images."""
    if not Path(haproxy).exists():
        raise RuntimeError(f"{haproxy} is missing: install Debian's haproxy "
                           "(scripts/setup-tests.sh)")
    root = RootFs()
    root.file(haproxy, "usr/local/sbin/haproxy")
    root.folder("usr/local/etc/haproxy")
    root.folder("var/lib/haproxy")
    for library in shared_libraries([haproxy]):
        root.file(library)
    return root.bytes()


def python_image(engine: Engine) -> str:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return engine.import_root(f"hive-test-python:{version}", python_root(), [
        "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin",
        "ENV LANG=C.UTF-8",
        # the interpreter's RUNPATH names where it was built; the official images run ldconfig
        "ENV LD_LIBRARY_PATH=/usr/local/lib",
        f'CMD ["python{version}"]'])


def haproxy_image(engine: Engine) -> str:
    return engine.import_root("hive-test-haproxy:local", haproxy_root(), [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        'CMD ["haproxy", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]'])
