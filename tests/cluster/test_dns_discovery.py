"""DNS discovery as a Kubernetes pod sees it: each node on a host of its own (a network
namespace), whose /etc/resolv.conf names a real DNS server (dnsmasq, on a host of its own) and
the search domains of a namespace ``mqtt``, as a pod's does; the nodes' config names the
headless service by its short name, and the system's resolver does the rest.

Three nodes form a cluster from the service's records; a fourth whose record is added joins
within a reload interval; with the DNS server hung the cluster stays, and the outage is logged
when it begins and when it ends. On loopback, `localhost` and <port> make two nodes meet.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import HiveProcess, free_port
from netns import Host, Testbed, testbed

from cluster._nodes import wait_for
from cluster.test_lan_namespaces import SECRET, NamespaceNodes, namespace_nodes, node_id

__all__ = ["namespace_nodes", "testbed"]  # the fixtures, imported for pytest

pytestmark = pytest.mark.timeout(120)

SERVICE = "hive-nodes"
DOMAIN = "mqtt.svc.cluster.local"
FQDN = f"{SERVICE}.{DOMAIN}"
CLUSTER_PORT = 7800
HEARTBEAT = "<failure-detection><heartbeat><interval>300</interval><timeout>1500</timeout>" \
            "</heartbeat></failure-detection>"


class PodDns:
    """dnsmasq on its own host, port 53, answering the service's A records from a hosts file."""

    def __init__(self, host: Host, folder: Path) -> None:
        self.host, self.folder = host, folder
        self.records = folder / "hosts.d"
        self.records.mkdir(parents=True)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = self.host.popen(
            ["dnsmasq", "--keep-in-foreground", "--port=53",
             f"--listen-address={self.host.address}", "--bind-interfaces", "--no-resolv",
             "--no-hosts", "--user=root", f"--hostsdir={self.records}", "--pid-file=",
             f"--host-record=ready.{DOMAIN},127.0.0.1", "--log-facility=-"],
            stdout=subprocess.DEVNULL, stderr=(self.folder / "dnsmasq.log").open("ab"))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def freeze(self) -> None:
        """A DNS server that takes queries and never answers (SIGSTOP)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def publish(self, hosts: list[Host]) -> None:
        """The service's endpoints: one A record per node (atomically replaced)."""
        temporary = self.folder / "endpoints.tmp"
        temporary.write_text("".join(f"{h.address} {FQDN}\n" for h in hosts))
        temporary.replace(self.records / "endpoints")


def pod_resolv_conf(host: Host, nameserver: str) -> None:
    """What Kubernetes writes into a pod of namespace ``mqtt`` (``ip netns exec`` mounts it)."""
    Path(f"/etc/netns/{host.name}/resolv.conf").write_text(
        f"nameserver {nameserver}\nsearch {DOMAIN} svc.cluster.local cluster.local\n"
        "options ndots:5 timeout:1 attempts:1\n")


def resolves(host: Host, name: str) -> set[str]:
    """The IPv4 addresses ``name`` has for a program on ``host`` (glibc, as Hive asks)."""
    done = host.run(["getent", "ahostsv4", name], timeout=10)
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


def dns_body(host: Host) -> str:
    return (f"<cluster><enabled>true</enabled><transport><tcp><bind-address>{host.address}"
            f"</bind-address><bind-port>{CLUSTER_PORT}</bind-port></tcp></transport>"
            f"<discovery><dns><discovery-address>{SERVICE}</discovery-address>"
            "<resolution-timeout>2</resolution-timeout><reload-interval>1</reload-interval>"
            f"</dns></discovery>{HEARTBEAT}{SECRET}</cluster>"
            "<rest-api><enabled>true</enabled><listeners><http><port>8080</port>"
            "<bind-address>127.0.0.1</bind-address></http></listeners></rest-api>"
            "<persistence><mode>in-memory</mode></persistence>")


def test_a_headless_service_name_forms_the_cluster_and_rides_out_a_dns_outage(
        testbed: Testbed, namespace_nodes: NamespaceNodes, tmp_path: Path) -> None:
    lan = testbed.segment()
    dns_host = testbed.host(lan)
    hosts = [testbed.host(lan) for _ in range(4)]
    dns = PodDns(dns_host, tmp_path / "dns")
    dns.publish(hosts[:3])
    dns.start()
    for host in hosts:
        pod_resolv_conf(host, dns_host.address)
    wait_for(lambda: resolves(hosts[0], f"ready.{DOMAIN}") == {"127.0.0.1"}, 15,
             "dnsmasq answers the pods")
    assert resolves(hosts[0], SERVICE) == {h.address for h in hosts[:3]}  # via the search list

    nodes = [namespace_nodes.add(host, dns_body(host)) for host in hosts]
    begun = time.monotonic()
    for node in nodes[:3]:
        node.start(timeout=40)
    expected = lambda: {node_id(n) for n in nodes[:3]}  # noqa: E731
    namespace_nodes.wait_members(nodes[:3], expected, 40, "three nodes from the service's records")
    print(f"\nDNS discovery: 3 nodes agreed on 3 members {time.monotonic() - begun:.2f} s after "
          "the first start")
    for node in nodes[:3]:
        node.wait_for_log(rf"DNS discovery: {SERVICE} resolves to "
                          + ", ".join(h.address for h in hosts[:3]).replace(".", r"\."))
        assert "is not among the addresses" not in node.log
    ids = {id(n): node_id(n) for n in nodes[:3]}

    # A new pod: its record appears, it starts, everyone finds it.
    dns.publish(hosts)
    nodes[3].start(timeout=40)
    joined = time.monotonic()
    namespace_nodes.wait_members(nodes, lambda: {node_id(n) for n in nodes}, 30,
                                 "the fourth node joins")
    print(f"DNS discovery: the 4th node was a member everywhere {time.monotonic() - joined:.2f} s "
          "after it served")

    # The DNS server hangs (glibc would wait 1 s for each of the 4 names of the search list):
    # each node gives up after resolution-timeout, keeps its members and warns; it comes back.
    dns.freeze()
    try:
        for node in nodes:
            node.wait_for_log(rf"WARNING - DNS discovery: cannot resolve {SERVICE}: no answer "
                              r"within 2 s; retrying", timeout=15)
        time.sleep(2)
        assert all(namespace_nodes.members(n) == {node_id(m) for m in nodes} for n in nodes)
    finally:
        dns.thaw()
    for node in nodes:
        node.wait_for_log(r"DNS discovery: answering again after [\d.]+ s and \d+ failed calls",
                          timeout=20)
    assert {ids[id(n)] for n in nodes[:3]} == {node_id(n) for n in nodes[:3]}
    for node in nodes:
        assert "Traceback" not in node.log


def test_a_node_whose_address_the_name_does_not_list_says_so(
        testbed: Testbed, namespace_nodes: NamespaceNodes, tmp_path: Path) -> None:
    lan = testbed.segment()
    dns_host, listed, unlisted = testbed.host(lan), testbed.host(lan), testbed.host(lan)
    dns = PodDns(dns_host, tmp_path / "dns")
    dns.publish([listed])
    dns.start()
    pod_resolv_conf(unlisted, dns_host.address)
    wait_for(lambda: resolves(unlisted, SERVICE) == {listed.address}, 15, "dnsmasq answers")
    node = namespace_nodes.add(unlisted, dns_body(unlisted)).start(timeout=40)
    node.wait_for_log(rf"DNS discovery: this node \({unlisted.address}:{CLUSTER_PORT}\) is not "
                      rf"among the addresses of {SERVICE}", timeout=15)


def test_localhost_and_the_port_element_make_two_nodes_on_one_host_meet(
        hive_factory: Callable[..., HiveProcess]) -> None:
    """Any name the system resolves will do (here from /etc/hosts); <port> is the others'."""
    ports = [free_port(), free_port()]

    def body(own: int, other: int) -> str:
        return (f"<cluster><enabled>true</enabled><transport><tcp><bind-address>127.0.0.1"
                f"</bind-address><bind-port>{own}</bind-port></tcp></transport><discovery><dns>"
                f"<discovery-address>localhost</discovery-address><port>{other}</port>"
                "<reload-interval>1</reload-interval></dns></discovery></cluster>"
                "<persistence><mode>in-memory</mode></persistence>")

    one = hive_factory(body=body(ports[0], ports[1]))
    two = hive_factory(body=body(ports[1], ports[0]))
    for node in (one, two):
        node.wait_for_log(r"Cluster size = 2, members", timeout=20)
    one.wait_for_log(rf"DNS discovery: the nodes are the addresses of localhost at port "
                     rf"{ports[1]}, resolved every 1 s")
