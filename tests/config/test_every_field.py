# ruff: noqa: E501  (a table: one field, the tests that show it, per entry)
"""Every value config.xml can hold either changes what a node does or is refused with a message.

Issue 9 found elements that were parsed and then never used (<host-discovery-address>,
<incoming-bandwidth-throttling>, <node-name>, <allow-extensions>, ...). This test walks every
field of every config model reachable from <hivemq> and requires an entry in FIELDS naming the
test(s) that show the field at work, or the refusal of a value; a new field without an entry
fails here, and so does an entry whose test no longer exists. A field holding a section (a model)
is shown by the fields inside it. An entry is "file::test" or "file::Class::test", several joined
with " + ".
"""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path

import pytest
from pydantic_xml import BaseXmlModel

from hive_core.config import HiveConfig
from hive_core.config._schema import model_shape

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent

E2E, CLUSTER, CONFIG = "tests/e2e/", "tests/cluster/", "tests/config/"
ADMIN = "tests/admin/"
REST_AUTH = ADMIN + "test_rest_auth.py::"
CONTROL = ADMIN + "test_control_center_config.py::"
BROWSER = ADMIN + "test_control_center.py::"
EFFECTS = E2E + "test_config_effects.py::"
LISTENERS = E2E + "test_listeners.py::"

FIELDS: dict[str, str] = {
    # <listeners>
    "TcpListener.port": LISTENERS + "test_bind_to_port_zero_logs_the_real_port + "
                        + E2E + "test_startup_errors.py::test_a_failed_bind_names_its_config_element",
    "_Listener.bind_address": LISTENERS + "test_bind_address_is_honoured + "
                              + E2E + "test_startup_errors.py::test_a_bind_address_this_host_does_not_have",
    "_Listener.name": E2E + "test_startup_errors.py::test_a_failed_bind_names_its_config_element",
    "_Listener.proxy_protocol": E2E + "test_proxy_protocol.py::test_the_headers_client_address_is_in_the_access_log + "
                                + E2E + "test_proxy_protocol.py::test_without_the_element_a_header_is_an_mqtt_protocol_error + "
                                + CLUSTER + "test_haproxy.py::test_every_listener_kind_takes_the_header_from_haproxy",
    "_Listener.trusted_proxies": E2E + "test_proxy_protocol.py::test_only_the_trusted_proxies_may_send_a_header",
    "TlsTcpListener.port": LISTENERS + "test_tls_listener_with_a_key_store",
    "ListenerTls.protocols": EFFECTS + "test_tls_protocols_and_cipher_suites_limit_what_a_client_may_use",
    "ListenerTls.cipher_suites": EFFECTS + "test_tls_protocols_and_cipher_suites_limit_what_a_client_may_use",
    "Keystore.path": LISTENERS + "test_tls_listener_with_a_key_store + "
                     + E2E + "test_java_keystores.py::test_a_listener_serves_tls_from_a_keytool_key_store",
    "Keystore.password": LISTENERS + "test_tls_listener_with_a_key_store",
    "Keystore.private_key_password": EFFECTS + "test_an_encrypted_key_is_opened_with_private_key_password",
    "Truststore.path": LISTENERS + "test_tls_client_authentication_required",
    "Truststore.password": LISTENERS + "test_tls_optional_client_auth_with_a_pkcs12_truststore",
    "ListenerTls.client_authentication_mode": LISTENERS + "test_tls_client_authentication_required + "
                                              + LISTENERS + "test_tls_optional_client_auth_with_a_pkcs12_truststore",
    "ListenerTls.handshake_timeout": EFFECTS + "test_tls_handshake_timeout_closes_a_silent_connection",
    "WebsocketListener.port": LISTENERS + "test_websocket_listener_qos0_and_qos1",
    "WebsocketListener.path": LISTENERS + "test_websocket_wrong_path_or_missing_subprotocol_is_refused",
    "WebsocketListener.subprotocols": EFFECTS + "test_websocket_subprotocols_and_extensions",
    "WebsocketListener.allow_extensions": EFFECTS + "test_websocket_subprotocols_and_extensions",
    "TlsWebsocketListener.port": LISTENERS + "test_tls_websocket_listener",
    # <mqtt>
    "QueuedMessages.max_queue_size": E2E + "test_qos.py::test_queue_limit_for_offline_session",
    "QueuedMessages.strategy": E2E + "test_qos.py::test_queue_limit_for_offline_session",
    "TopicAlias.enabled": E2E + "test_publish.py::test_inbound_topic_alias_disabled",
    "TopicAlias.max_per_client": E2E + "test_publish.py::test_outbound_topic_aliases_run_out",
    "MessageExpiry.max_interval": E2E + "test_publish.py::test_message_expiry_capped_by_node_maximum",
    "SessionExpiry.max_interval": E2E + "test_sessions.py::test_session_expiry_capped_by_max_interval",
    "Packets.max_packet_size": E2E + "test_bad_input.py::test_packet_over_the_maximum_size_gets_0x95",
    "ReceiveMaximum.server_receive_maximum":
        E2E + "test_qos.py::test_exceeding_server_receive_maximum_disconnects_0x93",
    "ReceiveMaximum.strategy":
        E2E + "test_qos.py::test_a_client_sending_past_the_receive_maximum_is_throttled_not_refused"
        + " + " + E2E + "test_qos.py::test_exceeding_server_receive_maximum_disconnects_0x93",
    "KeepAlive.allow_unlimited": E2E + "test_sessions.py::test_server_keep_alive_caps_the_client_request",
    "KeepAlive.max_keep_alive": E2E + "test_sessions.py::test_server_keep_alive_caps_the_client_request",
    "FeatureSwitch.enabled": E2E + "test_subscriptions.py::test_subscription_identifiers_disabled + "
                             + E2E + "test_subscriptions.py::test_wildcard_subscriptions_disabled + "
                             + E2E + "test_subscriptions.py::test_shared_subscriptions_disabled + "
                             + E2E + "test_retained.py::test_retained_messages_disabled",
    "QualityOfService.max_qos":
        E2E + "test_subscriptions.py::test_granted_qos_is_capped_by_the_configured_maximum",
    "InflightWindow.max_messages": E2E + "test_qos.py::test_inflight_window_v311",
    # <restrictions>
    "Restrictions.max_connections":
        E2E + "test_sessions.py::test_max_connections_refuses_v5_with_quota_exceeded",
    "Restrictions.max_client_id_length": E2E + "test_access_log.py::test_a_refused_connect_is_logged",
    "Restrictions.max_topic_length":
        EFFECTS + "test_max_topic_length_refuses_longer_topics_and_filters",
    "Restrictions.max_topic_levels":
        EFFECTS + "test_max_topic_levels_refuses_deeper_topics_and_filters",
    "Restrictions.no_connect_idle_timeout":
        E2E + "test_bad_input.py::test_a_connection_without_connect_is_closed_after_the_idle_timeout",
    "Restrictions.max_pre_connect_size":
        E2E + "test_bad_input.py::test_what_a_client_sends_before_connect_is_bounded + "
        + E2E + "test_bad_input.py::test_memory_of_unfinished_connects_is_freed_when_they_close + "
        + E2E + "test_bad_input.py::test_what_arrives_while_extensions_decide_is_bounded_too",
    "Restrictions.incoming_bandwidth_throttling":
        E2E + "test_throttling.py::test_a_client_sending_faster_than_the_limit_is_slowed_down_to_it",
    # <cluster>
    "Cluster.enabled": CLUSTER + "test_cluster_e2e.py::test_three_nodes_started_in_any_order_form_one_cluster"
                       " + " + CONFIG + "test_cluster_config_refusals.py::test_a_cluster_set_up_without_enabled_is_refused",
    "Cluster.node_name": EFFECTS + "test_node_name_is_the_nodes_id_in_the_cluster",
    "Cluster.host_discovery_address":
        CLUSTER + "test_nat.py::test_host_discovery_address_is_what_the_node_advertises + " + CONFIG
        + "test_cluster_config_refusals.py::test_host_discovery_address_and_a_different_external_address_are_refused",
    "TcpTransport.bind_address": CLUSTER + "test_cluster_e2e.py::test_three_nodes_started_in_any_order_form_one_cluster"
                                 " + " + CLUSTER + "test_advertised_address.py::test_the_advertised_address_follows_the_config",
    "TcpTransport.bind_port": CLUSTER + "test_cluster_e2e.py::test_three_nodes_started_in_any_order_form_one_cluster"
                              " + " + E2E + "test_startup_errors.py::test_a_failed_bind_names_its_config_element",
    "TcpTransport.external_address":
        CLUSTER + "test_nat.py::test_nodes_behind_nat_form_a_cluster_that_stays_formed",
    "TcpTransport.external_port":
        CLUSTER + "test_nat.py::test_nodes_behind_nat_form_a_cluster_that_stays_formed",
    "ClusterTls.enabled": CLUSTER + "test_cluster_tls.py::test_two_nodes_with_mutual_tls_form_a_cluster_and_route",
    "ClusterTls.protocols": "tests/test_certs.py::test_cluster_contexts_honour_protocols",
    "ClusterTls.cipher_suites":
        "tests/test_certs.py::test_cluster_contexts_honour_cipher_suites_and_the_client_side_stores",
    "ClusterTls.client_authentication_mode": "tests/test_certs.py::test_cluster_contexts_default_to_the_server_stores",
    "UdpTransport.bind_address": CLUSTER + "test_lan_loopback.py::test_three_hive_nodes_on_loopback_form_a_cluster"
                                 " + " + EFFECTS + "test_heartbeat_enabled_false_and_udp_external_address_reach_the_cluster",
    "UdpTransport.bind_port": E2E + "test_startup_errors.py::test_a_failed_bind_names_its_config_element",
    "UdpTransport.external_address":
        EFFECTS + "test_heartbeat_enabled_false_and_udp_external_address_reach_the_cluster",
    "UdpTransport.external_port":
        EFFECTS + "test_heartbeat_enabled_false_and_udp_external_address_reach_the_cluster",
    "UdpTransport.multicast_enabled": CONFIG + "test_config_errors.py::test_bad_file",
    "UdpTransport.multicast_address": CLUSTER + "test_lan_loopback.py::test_three_hive_nodes_on_loopback_form_a_cluster"
                                      " + " + CONFIG + "test_lan_discovery_config.py::test_a_wrong_value_is_refused_naming_the_element",
    "UdpTransport.multicast_port": CLUSTER + "test_lan_loopback.py::test_three_hive_nodes_on_loopback_form_a_cluster",
    "UdpTransport.multicast_ttl": EFFECTS + "test_multicast_ttl_is_the_announcements_ttl",
    "StaticNode.ip": CONFIG + "test_config_models.py::test_static_node_shapes_mix",
    "StaticNode.port_attribute": CONFIG + "test_config_models.py::test_static_node_shapes_mix",
    "StaticNode.host": CLUSTER + "test_cluster_e2e.py::test_three_nodes_started_in_any_order_form_one_cluster",
    "StaticNode.port": CLUSTER + "test_cluster_e2e.py::test_three_nodes_started_in_any_order_form_one_cluster",
    "MulticastDiscovery.announce_interval": CLUSTER + "test_lan_loopback.py::test_three_hive_nodes_on_loopback_form_a_cluster",
    "MulticastDiscovery.cluster_name": CLUSTER + "test_lan_loopback.py::test_two_clusters_on_one_group_stay_apart",
    "BroadcastDiscovery.broadcast_address": CLUSTER + "test_lan_loopback.py::test_three_hive_nodes_on_loopback_form_a_cluster",
    "BroadcastDiscovery.port": CLUSTER + "test_lan_loopback.py::test_broadcast_nodes_take_the_first_free_ports_and_hear_every_port",
    "BroadcastDiscovery.port_range":
        CLUSTER + "test_lan_loopback.py::test_broadcast_nodes_take_the_first_free_ports_and_hear_every_port",
    "BroadcastDiscovery.announce_interval": CLUSTER + "test_lan_loopback.py::test_a_silent_node_ages_out",
    "BroadcastDiscovery.cluster_name": CLUSTER + "test_lan_loopback.py::test_two_clusters_on_one_group_stay_apart",
    "DnsDiscovery.discovery_address":
        CLUSTER + "test_dns_discovery.py::test_a_headless_service_name_forms_the_cluster_and_rides_out_a_dns_outage",
    "DnsDiscovery.port": CLUSTER + "test_dns_discovery.py::test_localhost_and_the_port_element_make_two_nodes_on_one_host_meet",
    "DnsDiscovery.resolution_timeout":
        CLUSTER + "test_dns_discovery.py::test_a_headless_service_name_forms_the_cluster_and_rides_out_a_dns_outage",
    "DnsDiscovery.reload_interval":
        CLUSTER + "test_dns_discovery.py::test_a_headless_service_name_forms_the_cluster_and_rides_out_a_dns_outage",
    "ExtensionDiscovery.reload_interval":
        CLUSTER + "test_membership.py::test_extension_discovery_reloads_at_the_configured_interval",
    "ExtensionDiscovery.name":
        "tests/extensions/test_discovery_choice.py::test_the_name_chooses_one_and_the_others_are_told_why_they_idle"
        + " + tests/extensions/test_discovery_choice.py::"
        "test_a_name_no_extension_has_stops_the_node_naming_the_element",
    "Heartbeat.enabled": EFFECTS + "test_heartbeat_enabled_false_and_udp_external_address_reach_the_cluster",
    "Heartbeat.interval":
        CLUSTER + "test_cluster_e2e.py::test_a_frozen_node_is_dropped_by_heartbeat_and_comes_back_when_it_thaws",
    "Heartbeat.timeout":
        CLUSTER + "test_cluster_e2e.py::test_a_frozen_node_is_dropped_by_heartbeat_and_comes_back_when_it_thaws",
    "TcpHealthCheck.enabled": CLUSTER + "test_udp.py::test_the_health_check_can_be_switched_off_and_placed",
    "TcpHealthCheck.bind_address": CLUSTER + "test_udp.py::test_the_health_check_can_be_switched_off_and_placed",
    "TcpHealthCheck.bind_port": E2E + "test_startup_errors.py::test_a_failed_bind_names_its_config_element",
    "TcpHealthCheck.external_address":
        CLUSTER + "test_nat.py::test_health_check_behind_nat_uses_its_own_external_address",
    "TcpHealthCheck.external_port":
        CLUSTER + "test_nat.py::test_health_check_behind_nat_uses_its_own_external_address",
    "TcpHealthCheck.port_range": CLUSTER + "test_health_check.py::test_the_health_port_is_the_first_free_one_in_the_range"
                                 " + " + CONFIG + "test_cluster_config_refusals.py::test_health_check_port_range_0_means_the_bind_port_only",
    "ClusterAuthentication.shared_secret":
        CLUSTER + "test_cluster_authentication.py::test_a_node_with_another_secret_or_none_does_not_join_one_with_the_secret_does"
        " + " + CLUSTER + "test_cluster_authentication.py::test_strangers_get_the_challenge_and_nothing_else_and_change_nothing"
        " + " + CONFIG + "test_cluster_authentication_config.py::test_a_short_secret_is_refused_and_never_printed",
    "Replication.replica_count":
        "tests/faults/test_failover.py::test_the_node_of_a_persistent_session_killed_three_times"
        " + tests/faults/test_rolling.py::test_nodes_of_two_protocol_versions_serve_together",
    # <persistence>, <extensions>, <rest-api>
    "Persistence.mode": EFFECTS + "test_in_memory_persistence_keeps_nothing_across_a_restart",
    "Persistence.commit_interval": EFFECTS + "test_commit_interval_and_sync_reach_the_file_store",
    "Persistence.sync": EFFECTS + "test_commit_interval_and_sync_reach_the_file_store",
    "Persistence.delivery_hold": EFFECTS
    + "test_delivery_hold_keeps_the_publishers_puback_until_the_subscriber_acknowledges",
    "Extensions.disabled": "tests/extensions/test_loading.py::test_node_applies_config_disabled",
    "OverloadProtection.enabled": "tests/overload/test_overload_node.py::test_a_flooded_node_keeps_answering_and_loses_nothing + "
                                  "tests/overload/test_overload_node.py::test_disabled_the_node_reads_every_client_and_the_subscribers_queue_overflows + "
                                  "tests/overload/test_overload_cluster.py::test_a_node_under_pressure_slows_what_its_peer_forwards",
    "RestApi.enabled": CLUSTER + "test_rest.py::test_the_rest_api_is_off_unless_enabled",
    "HttpListener.port": CLUSTER + "test_rest.py::test_port_0_is_logged_and_a_single_node_answers_health_nodes_and_metrics"
                         " + " + CLUSTER + "test_rest.py::test_rest_port_already_taken_stops_the_start_with_a_clear_error",
    "HttpListener.bind_address":
        CLUSTER + "test_rest.py::test_port_0_is_logged_and_a_single_node_answers_health_nodes_and_metrics"
        " + " + ADMIN + "test_rest_bind.py::test_the_default_bind_address_is_not_reachable_from_another_host"
        " + " + ADMIN + "test_rest_bind.py::test_bound_to_every_interface_it_answers_another_host_only_with_credentials",
    "HttpsListener.port": REST_AUTH + "test_an_https_listener_with_tokens_and_the_cli_trusting_its_ca"
                          " + " + REST_AUTH + "test_https_with_client_certificates_required_needs_no_other_credentials",
    "RestApiAuth.enabled": REST_AUTH + "test_without_credentials_only_health_answers_and_only_with_its_status"
                           " + " + ADMIN + "test_rest_api_config.py::test_a_wrong_auth_section_is_refused_naming_the_element",
    "RestApiAuth.tokens": REST_AUTH + "test_right_credentials_get_200_by_basic_and_by_bearer"
                          " + " + ADMIN + "test_rest_bind.py::test_bound_to_every_interface_it_answers_another_host_only_with_credentials",
    "RestApiUser.name": REST_AUTH + "test_right_credentials_get_200_by_basic_and_by_bearer"
                        " + " + REST_AUTH + "test_wrong_credentials_get_401_are_counted_and_logged_at_most_every_10_s",
    "RestApiUser.password_hash": REST_AUTH + "test_right_credentials_get_200_by_basic_and_by_bearer"
                                 " + " + ADMIN + "test_passwords.py::test_hash_password_reads_stdin_and_its_output_is_accepted_by_the_config",
    "HttpListener.name": EFFECTS + "test_the_rest_listeners_name_is_in_the_log",
    # <control-center>
    "ControlCenter.enabled": CONTROL + "test_off_by_default_and_refused_without_users_or_with_a_user_twice"
                             " + " + BROWSER + "test_every_page_needs_a_login_and_a_wrong_password_is_refused",
    "ControlCenter.session_timeout": CONTROL + "test_a_login_ends_after_the_session_timeout_without_use",
    "ControlCenterUser.name": BROWSER + "test_every_page_needs_a_login_and_a_wrong_password_is_refused"
                              " + " + CONTROL + "test_off_by_default_and_refused_without_users_or_with_a_user_twice",
    "ControlCenterUser.password_hash": CONTROL + "test_a_login_ends_after_the_session_timeout_without_use",
}


def _declaring_class(model: type, name: str) -> type:
    return next(k for k in model.__mro__ if name in inspect.get_annotations(k))


def _value_fields() -> dict[str, str]:
    """'Model.field' -> an element path showing where it lives, for every value field."""
    found: dict[str, str] = {}

    def walk(model: type[BaseXmlModel], path: str) -> None:
        for name, slot in model_shape(model).slots.items():
            members = [m for m in slot.tags.values() if m is not None]
            key = f"{_declaring_class(model, name).__name__}.{name}"
            if slot.attribute is not None or not members:
                where = f"@{slot.attribute}" if slot.attribute else "/".join(
                    (*slot.wrappers, next(iter(slot.tags))))
                found.setdefault(key, f"{path}/{where}")
            for tag, member in slot.tags.items():
                if member is not None:
                    walk(member, "/".join((path, *slot.wrappers, tag)))

    walk(HiveConfig, "hivemq")
    return found


@functools.cache
def _tests_in(path: str) -> set[str]:
    """'name' and 'Class::name' of every test function in the file."""
    tree = ast.parse((ROOT / path).read_text())
    names = {node.name for node in tree.body
             if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}::{item.name}" for item in node.body
                      if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)}
    return names


def test_every_field_has_an_entry_and_every_entry_a_field() -> None:
    fields = _value_fields()
    missing = {key: where for key, where in fields.items() if key not in FIELDS}
    assert not missing, ("config fields without an entry in FIELDS (the test that shows each "
                         f"one at work, or its refusal): {missing}")
    stale = sorted(set(FIELDS) - set(fields))
    assert not stale, f"FIELDS names fields the models no longer have: {stale}"


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_the_entry_names_tests_that_exist(field: str) -> None:
    entry = FIELDS[field]
    for reference in entry.split(" + "):
        path, _, name = reference.partition("::")
        assert (ROOT / path).is_file(), f"{field}: no file {path}"
        assert name in _tests_in(path), f"{field}: no test {name} in {path}"


def test_the_check_fails_for_a_new_field() -> None:
    fields = _value_fields()
    assert "Restrictions.incoming_bandwidth_throttling" in fields
    assert len(fields) == len(FIELDS) > 80
