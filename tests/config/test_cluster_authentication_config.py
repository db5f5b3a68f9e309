"""<cluster><authentication>: a cluster that other hosts can reach must authenticate its nodes.

Issue 8: anything that reached the node port could join. A config whose cluster port is open to
other hosts (a LAN bind address, no bind address, an advertised LAN address) with neither a
shared secret nor cluster TLS requiring client certificates is refused, naming the element and
its line; a cluster on this host only needs neither, and without a bind address it then listens
on loopback only. A secret shorter than 16 characters is refused without being printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import free_port, run_to_exit

from hive_core.config import ConfigError, parse_config
from hive_core.node import cluster_settings

SECRET = "<authentication><shared-secret>a-secret-for-tests-only</shared-secret></authentication>"
TLS = ("<tls><enabled>true</enabled><server-keystore><path>node.pem</path></server-keystore>"
       "<server-certificate-truststore><path>ca.pem</path></server-certificate-truststore>"
       "{mode}</tls>")


def _refusal(cluster: str) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        parse_config(f"<hivemq>\n<cluster><enabled>true</enabled>\n{cluster}\n</cluster>\n"
                     "</hivemq>", source="config.xml")
    return refused.value


@pytest.mark.parametrize(("cluster", "path", "why"), [
    ("<transport><tcp><bind-address>10.0.0.1</bind-address></tcp></transport>",
     "transport/tcp/bind-address", "<bind-address> 10.0.0.1 is not a loopback address"),
    ("<transport><tcp><bind-address>0.0.0.0</bind-address></tcp></transport>"
     "<discovery><broadcast/></discovery>",
     "transport/tcp/bind-address", "<bind-address> 0.0.0.0 is every interface"),
    ('<discovery><static><node ip="10.0.0.1"/><node ip="10.0.0.2"/></static></discovery>',
     "", "without a <bind-address> it listens on every interface"),  # no <transport>: <cluster>
    ("<transport><tcp/></transport><discovery><extension/></discovery>",
     "transport/tcp", "without a <bind-address> it listens on every interface"),
    ("<transport><udp><bind-address>192.168.1.10</bind-address></udp></transport>",
     "transport/udp/bind-address", "<bind-address> 192.168.1.10 is not a loopback address"),
    ("<transport><tcp><bind-address>127.0.0.1</bind-address><external-address>203.0.113.9"
     "</external-address></tcp></transport>",
     "transport/tcp/external-address", "it tells other nodes to reach it on 203.0.113.9"),
    ("<host-discovery-address>10.0.0.7</host-discovery-address><discovery><broadcast/>"
     "</discovery>", "host-discovery-address", "it tells other nodes to reach it on 10.0.0.7"),
    ("<transport><tcp><bind-address>node-a.example</bind-address></tcp></transport>",
     "transport/tcp/bind-address", "<bind-address> node-a.example is not a loopback address"),
])
def test_a_cluster_other_hosts_reach_without_authentication_is_refused(
        cluster: str, path: str, why: str) -> None:
    error = _refusal(cluster)
    assert error.path == "/".join(("hivemq/cluster", path)).rstrip("/")
    assert error.line == (3 if path else 2)
    assert error.problem.startswith(f"this cluster is reachable from other hosts ({why}) and "
                                    "its nodes do not authenticate each other")
    assert "give every node the same <authentication><shared-secret> (at least 16 characters" \
        in error.problem
    assert "<client-authentication-mode>REQUIRED</client-authentication-mode>" in error.problem
    parse_config(f"<hivemq><cluster><enabled>true</enabled>{cluster}{SECRET}</cluster></hivemq>")


@pytest.mark.parametrize("mode", ["", "<client-authentication-mode>NONE"
                                      "</client-authentication-mode>",
                                  "<client-authentication-mode>OPTIONAL"
                                  "</client-authentication-mode>"])
def test_cluster_tls_authenticates_nodes_only_when_it_requires_client_certificates(
        mode: str) -> None:
    transport = ("<transport><tcp><bind-address>10.0.0.1</bind-address>" + TLS
                 + "</tcp></transport>")
    error = _refusal(transport.format(mode=mode))
    assert error.path.startswith("hivemq/cluster/transport/tcp/tls")
    assert error.problem.startswith(f"cluster TLS with client-authentication-mode "
                                    f"{'OPTIONAL' if 'OPTIONAL' in mode else 'NONE'} lets in a "
                                    "node without a certificate")
    required = transport.format(mode="<client-authentication-mode>REQUIRED"
                                     "</client-authentication-mode>")
    cluster = parse_config(f"<hivemq><cluster><enabled>true</enabled>{required}</cluster>"
                           "</hivemq>").cluster
    assert cluster.tls_authenticates_nodes and cluster.authentication.shared_secret is None


@pytest.mark.parametrize(("cluster", "bind_host"), [
    ("", "127.0.0.1"),  # the bare cluster: multicast on loopback
    ("<discovery><broadcast/></discovery>", "127.0.0.1"),
    ('<discovery><static><node ip="127.0.0.1"/><node><host>localhost</host></node></static>'
     "</discovery>", "127.0.0.1"),
    ("<transport><tcp><bind-address>127.0.0.1</bind-address></tcp></transport>", "127.0.0.1"),
    ("<transport><tcp><bind-address>localhost</bind-address></tcp></transport>", "localhost"),
    ("<transport><udp><bind-address>::1</bind-address></udp></transport>", "::1"),
    ("<transport><tcp><bind-address>127.0.0.5</bind-address><external-address>127.0.0.5"
     "</external-address></tcp></transport>", "127.0.0.5"),
])
def test_a_cluster_on_this_host_only_needs_no_secret_and_listens_on_loopback(
        cluster: str, bind_host: str) -> None:
    config = parse_config(f"<hivemq><cluster><enabled>true</enabled>{cluster}</cluster></hivemq>")
    assert config.cluster.outside_reach() is None
    settings = cluster_settings(config)
    assert settings.bind_host == bind_host and settings.shared_secret is None
    assert settings.health_check is not None and settings.health_check.bind_host == bind_host


def test_without_a_bind_address_a_lan_cluster_listens_everywhere_with_its_secret() -> None:
    config = parse_config('<hivemq><cluster><enabled>true</enabled><discovery><static><node '
                          f'ip="10.0.0.1"/></static></discovery>{SECRET}</cluster></hivemq>')
    settings = cluster_settings(config)
    assert settings.bind_host == "0.0.0.0"
    assert settings.shared_secret == "a-secret-for-tests-only"


def test_a_short_secret_is_refused_and_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    error = _refusal("<authentication><shared-secret>hunter2-pass</shared-secret>"
                     "</authentication>")
    assert (error.path, error.line) == ("hivemq/cluster/authentication/shared-secret", 3)
    assert error.problem.startswith("a shared secret needs at least 16 characters, this one "
                                    "has 12; make one with `python -c \"import secrets; "
                                    "print(secrets.token_urlsafe(32))\"`")
    assert "hunter2" not in str(error)
    monkeypatch.setenv("HIVE_CLUSTER_SECRET", "hunter2-env")
    error = _refusal("<authentication><shared-secret>${ENV:HIVE_CLUSTER_SECRET}</shared-secret>"
                     "</authentication>")
    assert "this one has 11" in error.problem and "hunter2" not in str(error)


def test_the_secret_stays_out_of_the_configs_repr() -> None:
    config = parse_config(f"<hivemq><cluster><enabled>true</enabled>{SECRET}</cluster></hivemq>")
    assert config.cluster.authentication.shared_secret == "a-secret-for-tests-only"
    assert "a-secret-for-tests-only" not in repr(config)


def test_hive_run_refuses_a_lan_cluster_without_authentication(tmp_path: Path) -> None:
    config = tmp_path / "config.xml"
    config.write_text(f"<hivemq>\n  <listeners><tcp-listener><port>{free_port()}</port>"
                      "<bind-address>127.0.0.1</bind-address></tcp-listener></listeners>\n"
                      "  <cluster>\n    <enabled>true</enabled>\n"
                      "    <transport><tcp><bind-address>192.0.2.10</bind-address></tcp>"
                      "</transport>\n  </cluster>\n</hivemq>\n")
    result = run_to_exit(config)
    assert result.returncode == 2
    assert result.stderr.startswith(f"hive: {config}, line 5, at hivemq/cluster/transport/tcp/"
                                    "bind-address: this cluster is reachable from other hosts")
    assert "Started Hive" not in result.stdout + result.stderr


def test_a_secret_from_a_file_as_docker_secrets_give_it(tmp_path: Path) -> None:
    """Risk (issue 20): secrets passed with -e showed in `docker inspect` and
    /proc/1/environ; ``${FILE:/run/secrets/...}`` reads one from a file instead."""
    secret = tmp_path / "cluster_secret"
    secret.write_text("a-secret-from-a-file-0123456789\n")
    config = parse_config("<hivemq><cluster><enabled>true</enabled><authentication>"
                          f"<shared-secret>${{FILE:{secret}}}</shared-secret></authentication>"
                          "</cluster></hivemq>")
    assert config.cluster.authentication.shared_secret == "a-secret-from-a-file-0123456789"
    secret.write_text("short-file\n")
    error = _refusal(f"<authentication><shared-secret>${{FILE:{secret}}}</shared-secret>"
                     "</authentication>")
    assert "this one has 10" in error.problem and "short-file" not in str(error)
    missing = tmp_path / "nope"
    error = _refusal(f"<authentication><shared-secret>${{FILE:{missing}}}</shared-secret>"
                     "</authentication>")
    assert (error.path, error.line) == ("hivemq/cluster/authentication/shared-secret", 3)
    assert f"cannot read the file {missing}" in error.problem
    assert "No such file or directory" in error.problem
