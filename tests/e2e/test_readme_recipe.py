"""The README's one-host cluster recipe works as pasted (issue 9: it did not).

The two shell blocks under "### On one host" are taken from README.md and run by bash in a
fresh folder that has the project's ``.venv``. The only change: the recipe's fixed ports (1883,
1884, 7801, 7802, 8881, 8882) become free ones, since other tests run on this machine at the
same time. Every process the recipe starts is found while it runs and stopped by PID.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import free_port

pytestmark = pytest.mark.timeout(120)

README = Path(__file__).resolve().parents[2] / "README.md"
RECIPE_PORTS = ("1883", "1884", "7801", "7802", "8881", "8882")


def recipe_blocks() -> list[str]:
    text = README.read_text()
    section = text[text.index("### On one host"):text.index("### On several hosts")]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 2, "the one-host recipe is two bash blocks: start, then try it"
    return blocks


def _with_free_ports(script: str) -> str:
    mapping = {port: str(free_port()) for port in RECIPE_PORTS}
    return re.sub(r"\b(" + "|".join(RECIPE_PORTS) + r")\b", lambda m: mapping[m.group(1)],
                  script)


def _stop(pids: set[int]) -> None:
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            proc.send_signal(signal.SIGTERM)
            procs.append(proc)
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=15)
    for proc in alive:
        proc.kill()


def test_the_one_host_recipe_forms_a_cluster_and_carries_a_message(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    assert (tmp_path / ".venv" / "bin" / "hive").exists()
    script = tmp_path / "recipe.sh"
    script.write_text(_with_free_ports("\n".join(recipe_blocks())))
    output = tmp_path / "recipe.out"
    started: set[int] = set()
    with output.open("w") as out:
        bash = subprocess.Popen(["bash", str(script)], cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, "LC_ALL": "C"})
        try:
            deadline = time.monotonic() + 90
            while bash.poll() is None and time.monotonic() < deadline:
                try:
                    started |= {p.pid for p in psutil.Process(bash.pid).children(recursive=True)}
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.1)
            assert bash.poll() is not None, "the recipe did not finish within 90 s"
        finally:
            if bash.poll() is None:
                bash.kill()
                bash.wait(5)
            _stop(started)
    printed = output.read_text()
    assert bash.returncode == 0, printed
    assert "Cluster size: 2" in printed, printed
    assert "hello from node 1" in printed, printed
    for log in ("node1.log", "node2.log"):
        assert "Started Hive in" in (tmp_path / "demo" / log).read_text()
    assert {"data1", "data2"} <= {p.name for p in (tmp_path / "demo").iterdir()}
