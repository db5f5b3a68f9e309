"""<cluster> settings accepted and then ignored, or refused with a wrong message (issue 9).

- A <cluster> that sets things up but never says <enabled> (seed 000's shape) is refused: a
  node that silently runs alone while its operator believes it is clustered splits the clients
  into brokers that do not see each other's messages. A warning in a start-up log is too easy
  to miss for that; the fix is one line and the message says which.
- <tcp-health-check><port-range>0</port-range> means "bind-port only" and is accepted (it was
  refused with "expected a positive integer or 0, got '0'").
- <host-discovery-address> and the transport's <external-address> say the same thing; two
  different values are refused.
"""

from __future__ import annotations

import pytest

from hive_core.config import ConfigError, parse_config

# A cluster reachable from other hosts needs one (see test_cluster_authentication_config.py).
SECRET = "<authentication><shared-secret>a-secret-for-tests-only</shared-secret></authentication>"


def _refusal(xml: str) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        parse_config(f"<hivemq>{xml}</hivemq>", source="config.xml")
    return refused.value


@pytest.mark.parametrize(("inside", "named"), [
    ('<discovery><static><node ip="10.0.0.1"/></static></discovery>', "<discovery>"),
    ("<transport><tcp/></transport>", "<transport>"),
    ("<host-discovery-address>10.0.0.1</host-discovery-address>", "<host-discovery-address>"),
    ("<replication><replica-count>3</replica-count></replication>", "<replication>"),
    ("<failure-detection><heartbeat><interval>500</interval></heartbeat></failure-detection>",
     "<failure-detection>"),
    ("<node-name>a</node-name>", "<node-name>"),
])
def test_a_cluster_set_up_without_enabled_is_refused(inside: str, named: str) -> None:
    error = _refusal(f"<cluster>{inside}</cluster>")
    assert error.path == "hivemq/cluster" and error.line == 1
    assert f"<cluster> sets {named} but not <enabled>" in error.problem
    assert "add <enabled>true</enabled>" in error.problem
    assert "<enabled>false</enabled> to run it alone on purpose" in error.problem


def test_seed_000_is_refused_with_every_element_it_sets_named() -> None:
    error = _refusal('<cluster><discovery><static><node ip="192.168.1.101"/></static>'
                     "</discovery><host-discovery-address>192.168.1.101"
                     "</host-discovery-address></cluster>")
    assert "<cluster> sets <discovery>, <host-discovery-address> but not <enabled>" \
        in error.problem


@pytest.mark.parametrize("enabled", ["true", "false"])
def test_saying_enabled_either_way_is_enough(enabled: str) -> None:
    config = parse_config(f"<hivemq><cluster><enabled>{enabled}</enabled><discovery><static>"
                          f'<node ip="10.0.0.1"/></static></discovery>{SECRET}</cluster></hivemq>')
    assert config.cluster.enabled is (enabled == "true")


@pytest.mark.parametrize("xml", ["", "<cluster/>", "<cluster></cluster>"])
def test_no_cluster_or_an_empty_one_is_simply_off(xml: str) -> None:
    assert parse_config(f"<hivemq>{xml}</hivemq>").cluster.enabled is False


def _health(inside: str) -> str:
    return ("<cluster><enabled>true</enabled><failure-detection><tcp-health-check>"
            f"{inside}</tcp-health-check></failure-detection></cluster>")


def test_health_check_port_range_0_means_the_bind_port_only() -> None:
    health = _health("<bind-port>7900</bind-port><port-range>0</port-range>")
    check = parse_config(f"<hivemq>{health}</hivemq>").cluster.failure_detection.tcp_health_check
    assert (check.bind_port, check.port_range) == (7900, 0)


def test_health_check_port_range_past_65535_is_refused() -> None:
    error = _refusal(_health("<bind-port>65500</bind-port><port-range>50</port-range>"))
    assert error.path == "hivemq/cluster/failure-detection/tcp-health-check/port-range"
    assert error.problem == "bind-port 65500 + port-range 50 goes past port 65535"


def test_health_check_negative_port_range_is_refused() -> None:
    error = _refusal(_health("<port-range>-1</port-range>"))
    assert error.path.endswith("tcp-health-check/port-range")
    assert "non-negative integer" in error.problem


def test_host_discovery_address_is_the_external_address() -> None:
    cluster = parse_config("<hivemq><cluster><enabled>true</enabled><host-discovery-address>"
                           f"10.0.0.7</host-discovery-address>{SECRET}</cluster></hivemq>").cluster
    assert cluster.external_address == "10.0.0.7"


def test_host_discovery_address_and_a_different_external_address_are_refused() -> None:
    error = _refusal("<cluster><enabled>true</enabled><host-discovery-address>10.0.0.7"
                     "</host-discovery-address><transport><tcp><external-address>10.9.9.9"
                     "</external-address></tcp></transport></cluster>")
    assert error.path == "hivemq/cluster/host-discovery-address"
    assert "both say where other nodes reach this node; keep one of them" in error.problem
    same = parse_config("<hivemq><cluster><enabled>true</enabled><host-discovery-address>10.0.0.7"
                        "</host-discovery-address><transport><tcp><external-address>10.0.0.7"
                        f"</external-address></tcp></transport>{SECRET}</cluster></hivemq>")
    assert same.cluster.external_address == "10.0.0.7"
