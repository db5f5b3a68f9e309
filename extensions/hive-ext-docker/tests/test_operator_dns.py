"""As an operator would: three `hive run` nodes on loopback addresses with nothing but DNS
discovery configured, and dnsmasq serving ``tasks.<service>`` A records as a swarm's DNS would.

They form one cluster; a node killed with kill -9 (its record withdrawn, as the swarm does for a
dead task) is dropped; restarted, it rejoins; with the resolver stopped the cluster stays and the
nodes count (REST metrics) and log the failures; with it back, a new node joins. The nodes are
hive-broker's ``hive_processes``, each on an address of its own and the same cluster port, as
the tasks of a service are.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from _testbed import Dnsmasq, agree, loopback_prefix, port_free_on_all, ride_out_an_outage, views

pytestmark = pytest.mark.operator

FAILED = re.compile(r"docker-discovery: cannot query DNS tasks\.\S+ A .*: timeout: ")


def test_tasks_records_form_a_cluster_and_ride_out_a_resolver_outage(
        dnsmasq: Dnsmasq, hive_processes: Any, record_property: pytest.RecordProperty) -> None:
    prefix = loopback_prefix()
    hosts = [f"{prefix}.{10 + i}" for i in range(4)]
    cluster_port = port_free_on_all(hosts)
    name = f"tasks.hive-{uuid.uuid4().hex[:6]}"
    environment = {  # as a container would get them; cluster-port: each node's own
        "HIVE_DOCKER_DISCOVERY_MODE": "dns",
        "HIVE_DOCKER_DISCOVERY_DNS_NAME": name,
        "HIVE_DOCKER_DISCOVERY_RESOLVER_ADDRESS": "127.0.0.1",
        "HIVE_DOCKER_DISCOVERY_RESOLVER_PORT": str(dnsmasq.port),
        "HIVE_DOCKER_DISCOVERY_RESOLUTION_TIMEOUT": "1",
    }
    everyone = [hive_processes.add(host=host, cluster_port=cluster_port, env=environment)
                for host in hosts]
    nodes, newcomer = everyone[:3], everyone[3]
    dnsmasq.set_records(name, hosts[:3])  # the three tasks of the service
    formed, after_serving = hive_processes.form(nodes)
    record_property("dns_3_node_cluster_formed_s", round(formed, 2))
    print(f"\nDNS mode: 3 nodes started and agreed on 3 members in {formed:.2f} s "
          f"({after_serving:.2f} s after the last one served; {dnsmasq.version})")
    ids = [node.node_id for node in nodes]

    # kill -9: its task's record goes, the others drop it
    victim, survivors = nodes[2], nodes[:2]
    victim.kill()
    dnsmasq.set_records(name, hosts[:2])
    hive_processes.wait_until(lambda: agree(survivors, 2), 30, "the survivors drop the killed node")
    assert ids[2] not in views(survivors)[0]

    # restarted (its record back), it rejoins with its own id
    dnsmasq.set_records(name, hosts[:3])
    hive_processes.join(victim, nodes)
    assert victim.node_id == ids[2]

    # the resolver goes away, then comes back on the same port
    ride_out_an_outage(nodes, dnsmasq.stop, dnsmasq.start, FAILED,
                       "docker-discovery.errors.timeout", min_failed=2)

    # a new node joins
    dnsmasq.set_records(name, hosts)
    joined = hive_processes.join(newcomer, everyone)
    record_property("dns_4th_node_joined_s", round(joined, 2))
