"""The control center in a real browser: Debian's headless Chromium, driven by Selenium through
chromedriver, against a real 3-node cluster (one cluster and one browser for the module).

Each test checks what a person would see on the page, and keeps a screenshot of it in
``test-artifacts/control-center/`` (or ``$HIVE_TEST_ARTIFACTS/control-center/``).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from cluster._nodes import cluster_body, distinct_free_ports, node_id, wait_for, wait_for_members
from conftest import HiveProcess, render_config

pytestmark = pytest.mark.timeout(120)

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
    pytest.fail("the control center tests need Debian's chromium and chromium-driver "
                "(scripts/setup-tests.sh installs them)", pytrace=False)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

USER, PASSWORD = "operator", "a long control center password"
ARTIFACTS = Path(os.environ.get("HIVE_TEST_ARTIFACTS")
                 or Path(__file__).resolve().parents[2] / "test-artifacts") / "control-center"


def _password_hash() -> str:
    return subprocess.run([sys.executable, "-m", "hive_core.cli", "rest-api", "hash-password",
                           "--password-stdin"],
                          input=PASSWORD + "\n", capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


@pytest.fixture(scope="module")
def nodes() -> Iterator[list[HiveProcess]]:
    """Three nodes, each with its control center on a free loopback port."""
    folder = Path(tempfile.mkdtemp(prefix="hive-cc-"))
    hashed = _password_hash()
    ports = distinct_free_ports(12)
    cluster, mqtt_ports, rest, web = ports[0:3], ports[3:6], ports[6:9], ports[9:12]
    started: list[HiveProcess] = []
    try:
        for index in range(3):
            control = ("<control-center><enabled>true</enabled><listeners><http>"
                       f"<port>{web[index]}</port></http></listeners><users><user>"
                       f"<name>{USER}</name><password-hash>{hashed}</password-hash></user>"
                       "</users></control-center>")
            body = cluster_body(cluster[index], cluster, rest[index], extra=control)
            node_folder = folder / f"node{index}"
            node_folder.mkdir()
            node = HiveProcess(node_folder, render_config(mqtt_ports[index], body),
                               mqtt_ports[index], {"cluster": cluster[index],
                                                   "rest": rest[index], "web": web[index]})
            started.append(node.start())
        wait_for_members(started, 3)
        yield started
    finally:
        for node in started:
            node.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    profile = tempfile.mkdtemp(prefix="hive-cc-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()  # chromedriver and its Chromium, by the service's PID
        shutil.rmtree(profile, ignore_errors=True)


def url(node: HiveProcess, path: str = "/") -> str:
    return f"http://127.0.0.1:{node.ports['web']}{path}"


def screenshot(driver: WebDriver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def until(driver: WebDriver, condition: Any, what: str, timeout: float = 15.0) -> Any:
    """Until ``condition(driver)`` is truthy; pages re-render, so an element found a moment
    ago may be gone: that counts as not yet."""
    return WebDriverWait(driver, timeout, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException)).until(condition, message=what)


def click(driver: WebDriver, selector: str, what: str) -> None:
    """Click the element ``selector`` finds, finding it again if the page re-rendered it
    between the finding and the click (the backups page refreshes every second)."""
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, selector).click() or True, what)


def log_in(driver: WebDriver, node: HiveProcess, password: str = PASSWORD) -> None:
    driver.delete_all_cookies()
    driver.get(url(node, "/login"))
    driver.find_element(By.ID, "user").send_keys(USER)
    driver.find_element(By.ID, "password").send_keys(password)
    driver.find_element(By.ID, "login-button").click()


SEARCH_FIELDS = {"clients": "client-search", "retained": "retained-search",
                 "subscriptions": "subscriptions-search"}


def search_on(driver: WebDriver, node: HiveProcess, page: str, text: str) -> None:
    """Open ``page`` (clients, retained, subscriptions) of ``node`` and search it for ``text``."""
    driver.get(url(node, f"/#{page}"))
    field = until(driver, lambda d: d.find_element(By.ID, SEARCH_FIELDS[page]),
                  f"the search of {page}")
    field.send_keys(text)
    field.submit()


def disconnect_in_the_details(driver: WebDriver) -> None:
    """Press the client details' disconnect button, confirm, and wait for the answer."""
    button = driver.find_element(By.ID, "disconnect")
    until(driver, lambda d: button.is_displayed(), "the disconnect button")
    button.click()
    driver.switch_to.alert.accept()
    until(driver, lambda d: "disconnected" in d.find_element(
        By.ID, "disconnect-result").text, "the confirmation")


def node_rows(driver: WebDriver) -> dict[str, str]:
    """The overview's node table: node id -> state, as shown."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#nodes tbody tr")
    return {row.get_attribute("data-node") or "": row.find_elements(By.TAG_NAME, "td")[1].text
            for row in rows}


def test_every_page_needs_a_login_and_a_wrong_password_is_refused(
        nodes: list[HiveProcess], browser: WebDriver) -> None:
    browser.delete_all_cookies()
    browser.get(url(nodes[0], "/"))
    until(browser, lambda d: d.find_elements(By.ID, "login-form"), "the login page")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url(nodes[0], "/cc/api/overview"), timeout=5)
    assert refused.value.code == 401
    log_in(browser, nodes[0], "not the password")
    error = until(browser, lambda d: d.find_element(By.ID, "login-error"), "the refusal")
    assert "Wrong user name or password" in error.text
    screenshot(browser, "login-refused")
    assert "failed login as 'operator'" in nodes[0].log


def test_the_overview_shows_every_node_with_live_rates(nodes: list[HiveProcess],
                                                       browser: WebDriver) -> None:
    log_in(browser, nodes[0])
    ids = {node_id(n) for n in nodes}
    until(browser, lambda d: set(node_rows(d)) == ids, "the three nodes in the overview")
    assert set(node_rows(browser).values()) == {"RUNNING"}
    assert browser.find_element(By.ID, "who").text == USER
    # Traffic on the third node shows on the first node's page (the load rides on heartbeats).
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="cc-load")
    client.connect("127.0.0.1", nodes[2].port)
    client.loop_start()
    third = node_id(nodes[2])
    try:
        def busy(driver: WebDriver) -> bool:
            for _ in range(200):
                client.publish("cc/load", b"x" * 16, qos=0)
            row = driver.find_element(By.CSS_SELECTOR, f'#nodes tr[data-node="{third}"]')
            cells = row.find_elements(By.TAG_NAME, "td")
            return cells[4].text not in ("-", "0") and cells[6].text not in ("-", "0", "0.0")
        until(browser, busy, "node 3's connection and message rate on node 1's overview", 30)
        charts = browser.find_elements(By.CSS_SELECTOR, "#charts svg.chart")
        assert len(charts) == 3
        def chart(driver: WebDriver) -> dict[str, Any] | None:
            """Node 3's chart, read whole in one go: the page redraws it every few seconds,
            and an element read after a redraw is stale (``until`` then reads it again)."""
            svg = driver.find_element(By.CSS_SELECTOR, f'#charts svg[data-node="{third}"]')
            lines = svg.find_elements(By.TAG_NAME, "polyline")
            if not lines:
                return None
            return {"colours": {line.get_attribute("class"): line.value_of_css_property("stroke")
                                for line in lines},
                    "axes": (bool(svg.find_elements(By.CSS_SELECTOR, ".x-axis")),
                             bool(svg.find_elements(By.CSS_SELECTOR, ".y-axis"))),
                    "labels": [t.text for t in svg.find_elements(By.TAG_NAME, "text")]}
        drawn = until(browser, chart, "a chart line for node 3")
        # In and out in two colours, with axes, their units and a legend.
        colours, labels = drawn["colours"], drawn["labels"]
        assert set(colours) == {"line-in", "line-out"}
        assert colours["line-in"] != colours["line-out"], colours
        assert drawn["axes"] == (True, True)
        assert "msg/s" in labels and "now" in labels and "time" in labels, labels
        assert any("in" in t and "out" in t and "messages/s" in t for t in labels), labels
        print(f"overview: {screenshot(browser, 'overview')}")
    finally:
        client.loop_stop()
        client.disconnect()


def test_the_overview_shows_the_latency_of_messages_from_another_node(
        nodes: list[HiveProcess], browser: WebDriver) -> None:
    received: list[bytes] = []
    subscriber = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="cc-latency-sub")
    subscriber.on_message = lambda _c, _u, message: received.append(message.payload)
    subscriber.connect("127.0.0.1", nodes[1].port)
    subscriber.loop_start()
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="cc-latency-pub")
    publisher.connect("127.0.0.1", nodes[0].port)
    publisher.loop_start()
    origin = node_id(nodes[0])
    try:
        subscriber.subscribe("cc/latency", qos=1)

        def crossed() -> bool:  # until the route is known, a message stays on its node
            publisher.publish("cc/latency", b"timed", qos=1).wait_for_publish(5)
            return bool(received)
        wait_for(crossed, 15, "a message from node 1 to node 2")
        for _ in range(49):
            publisher.publish("cc/latency", b"timed", qos=1).wait_for_publish(5)
        wait_for(lambda: len(received) >= 50, 15, "the messages at the subscriber")
        log_in(browser, nodes[1])

        def timed(driver: WebDriver) -> list[str]:
            row = driver.find_element(By.CSS_SELECTOR, f'#latency tr[data-node="{origin}"]')
            cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            return cells if cells[4].isdigit() and int(cells[4]) >= 50 else []
        cells = until(browser, timed, "node 1's row in node 2's latency table")
        # "≤ 0.5 ms / ≤ 2.5 ms": the p50 and p99 bucket bounds of the delivery time
        assert re.fullmatch(r"≤ [\d.]+ ms / ≤ [\d.]+ ms", cells[1]), cells
        print(f"latency: {cells}; {screenshot(browser, 'overview-latency')}")
    finally:
        for client in (publisher, subscriber):
            client.loop_stop()
            client.disconnect()


def test_a_client_is_found_from_any_node_and_disconnected_where_it_is(
        nodes: list[HiveProcess], browser: WebDriver) -> None:
    reasons: list[int] = []
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="cc-finder-1",
                         protocol=mqtt.MQTTv5)
    client.on_disconnect = lambda c, u, flags, reason, props: reasons.append(reason.value)
    subscribed: list[int] = []
    client.on_subscribe = lambda c, u, mid, codes, props: subscribed.append(mid)
    properties = mqtt.Properties(mqtt.PacketTypes.CONNECT)
    properties.SessionExpiryInterval = 300
    client.connect("127.0.0.1", nodes[1].port, clean_start=False, properties=properties)
    client.loop_start()
    try:
        wait_for(lambda: client.is_connected(), 10, "the client to connect")
        client.subscribe("cc/finder/#", qos=1)
        wait_for(lambda: subscribed, 10, "the SUBACK")
        # Node 1's page finds it, on node 2, with what node 2 knows of it (the node link).
        log_in(browser, nodes[0])
        until(browser, lambda d: d.find_elements(By.ID, "who"), "the overview")
        search_on(browser, nodes[0], "clients", "finder")
        row = until(browser, lambda d: [td.text for td in d.find_element(
            By.CSS_SELECTOR, '#client-results tr[data-client="cc-finder-1"]').find_elements(
            By.TAG_NAME, "td")], "the client")
        assert row == ["cc-finder-1", node_id(nodes[1]), "true", "true", "1", "0", "0"], row
        # Its details on node 1's page too: the subscription, where it is connected.
        click(browser, 'a[data-client="cc-finder-1"]', "the client's link on node 1")
        until(browser, lambda d: "cc/finder/#" in d.find_element(
            By.ID, "detail-subscriptions").text, "its subscription in node 1's details")
        fields = browser.find_element(By.ID, "detail-fields").text
        assert node_id(nodes[1]) in fields and "3.1.1" not in fields and "5.0" in fields, fields
        assert not browser.find_element(By.ID, "disconnect").is_displayed()
        assert "disconnect it from that node's control center" in browser.find_element(
            By.ID, "disconnect-result").text
        screenshot(browser, "client-found-elsewhere")
        # On node 2's page: its details, and the disconnect.
        log_in(browser, nodes[1])
        until(browser, lambda d: d.find_elements(By.ID, "who"), "the overview")
        search_on(browser, nodes[1], "clients", "cc-finder-1")
        click(browser, 'a[data-client="cc-finder-1"]', "the client's link")
        until(browser, lambda d: "cc/finder/#" in d.find_element(
            By.ID, "detail-subscriptions").text, "its subscription in the details")
        screenshot(browser, "client-details")
        disconnect_in_the_details(browser)
        wait_for(lambda: reasons, 10, "the client to be disconnected")
        assert reasons[0] == 0x98  # Administrative action: the client reads why
        wait_for(lambda: "control center: user 'operator' disconnected client 'cc-finder-1'"
                 in nodes[1].log, 5, "the action in the log, with the user")
    finally:
        client.loop_stop()
        client.disconnect()


def test_retained_messages_and_subscriptions_are_browsed(nodes: list[HiveProcess],
                                                         browser: WebDriver) -> None:
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="cc-retainer")
    publisher.connect("127.0.0.1", nodes[2].port)
    publisher.loop_start()
    subscriber = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="cc-watcher")
    subscriber.connect("127.0.0.1", nodes[2].port)
    subscriber.loop_start()
    try:
        for index in range(5):
            publisher.publish(f"cc/plant/{index}/state", f"running {index}", qos=1,
                              retain=True).wait_for_publish(5)
        subscriber.subscribe("cc/plant/+/alarm", qos=1)
        log_in(browser, nodes[0])
        until(browser, lambda d: d.find_elements(By.ID, "who"), "the overview")
        search_on(browser, nodes[0], "retained", "cc/plant")
        until(browser, lambda d: len(d.find_elements(
            By.CSS_SELECTOR, "#retained-results tbody tr")) == 5, "the 5 retained messages")
        until(browser, lambda d: "running 3" in d.find_element(
            By.CSS_SELECTOR, '#retained-results tr[data-topic="cc/plant/3/state"]').text,
            "the payload of cc/plant/3/state")
        screenshot(browser, "retained")
        search_on(browser, nodes[0], "subscriptions", "alarm")
        until(browser, lambda d: "cc/plant/+/alarm" in d.find_element(
            By.CSS_SELECTOR, f'#subscriptions-remote tr[data-node="{node_id(nodes[2])}"]').text,
            "node 3's subscription on node 1's page")
        screenshot(browser, "subscriptions")
    finally:
        for client in (publisher, subscriber):
            client.loop_stop()
            client.disconnect()


def test_a_backup_is_made_downloaded_uploaded_and_imported_from_the_page(
        nodes: list[HiveProcess], browser: WebDriver, tmp_path: Path) -> None:
    log_in(browser, nodes[0])
    until(browser, lambda d: d.find_elements(By.ID, "who"), "the overview")
    browser.get(url(nodes[0], "/#backups"))
    until(browser, lambda d: d.find_element(By.ID, "backup-create"), "the page").click()
    backup_id = until(browser, lambda d: [r.get_attribute("data-backup") for r in d.find_elements(
        By.CSS_SELECTOR, "#backups tbody tr") if "COMPLETED" in r.text], "a backup", 30)[0]
    href = until(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, f'#backups tr[data-backup="{backup_id}"]').find_element(
        By.LINK_TEXT, "Download").get_attribute("href"), "its download link")
    cookie = browser.get_cookie("hive_cc")
    assert cookie is not None
    request = urllib.request.Request(href, headers={"Cookie": f"hive_cc={cookie['value']}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        data = answer.read()
    assert data[:8] == b"HIVEBKP1"  # the backup format's magic
    # A file that is not a backup is refused, and says why.
    junk = tmp_path / "junk.backup"
    junk.write_bytes(b"not a backup at all")
    browser.find_element(By.ID, "backup-file").send_keys(str(junk))
    browser.find_element(By.ID, "backup-upload").click()
    until(browser, lambda d: "was not taken" in d.find_element(By.ID, "backup-message").text,
          "the refusal of a damaged file")
    # The downloaded file, uploaded again, becomes a backup of its own, and imports.
    saved = tmp_path / f"{backup_id}.backup"
    saved.write_bytes(data)
    browser.find_element(By.ID, "backup-file").clear()
    browser.find_element(By.ID, "backup-file").send_keys(str(saved))
    browser.find_element(By.ID, "backup-upload").click()
    message = until(browser, lambda d: d.find_element(By.ID, "backup-message").text if
                    "uploaded as backup" in d.find_element(By.ID, "backup-message").text
                    else None, "the upload")
    uploaded = message.split("uploaded as backup ")[1].split(":")[0]
    assert uploaded != backup_id
    click(browser, f'#backups button[data-backup="{uploaded}"]', "its import button")
    browser.switch_to.alert.accept()
    until(browser, lambda d: "RESTORE_COMPLETED" in d.find_element(
        By.CSS_SELECTOR, f'#backups tr[data-backup="{uploaded}"]').text, "the import", 30)
    screenshot(browser, "backups")
    wait_for(lambda: f"control center: user 'operator' started the import of backup {uploaded}"
             in nodes[0].log and f"user 'operator' uploaded backup {uploaded}" in nodes[0].log,
             5, "the upload and the import in the log, with the user")


def test_the_extensions_page_lists_what_is_loaded(nodes: list[HiveProcess],
                                                  browser: WebDriver) -> None:
    log_in(browser, nodes[0])
    until(browser, lambda d: d.find_elements(By.ID, "who"), "the overview")
    browser.get(url(nodes[0], "/#extensions"))
    text = until(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, '#extensions tr[data-extension="static_discovery"]').text,
        "the extensions")
    assert "built-in" in text and "yes" in text
    screenshot(browser, "extensions")


def test_the_node_list_after_a_node_is_killed(nodes: list[HiveProcess],
                                              browser: WebDriver) -> None:
    victim = nodes[2]
    gone = node_id(victim)
    log_in(browser, nodes[0])
    until(browser, lambda d: gone in node_rows(d), "node 3 in the overview")
    victim.kill()
    try:
        until(browser, lambda d: gone not in node_rows(d) and len(node_rows(d)) == 2,
              "node 3 gone from the overview", 30)
        print(f"after kill -9: {screenshot(browser, 'overview-after-kill')}")
    finally:
        victim.start()
        wait_for_members(nodes, 3, timeout=30)
    until(browser, lambda d: gone in node_rows(d), "node 3 back in the overview", 30)


def test_a_logout_ends_the_session(nodes: list[HiveProcess], browser: WebDriver) -> None:
    log_in(browser, nodes[0])
    until(browser, lambda d: d.find_elements(By.ID, "who"), "the overview")
    cookie = browser.get_cookie("hive_cc")
    assert cookie is not None and cookie.get("httpOnly")
    browser.find_element(By.ID, "logout").click()
    until(browser, lambda d: d.find_elements(By.ID, "login-form"), "the login page")
    request = urllib.request.Request(url(nodes[0], "/cc/api/overview"),
                                     headers={"Cookie": f"hive_cc={cookie['value']}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 401  # the old cookie is worthless now


def test_a_client_id_that_needs_url_encoding_has_its_details_and_disconnect(
        nodes: list[HiveProcess], browser: WebDriver) -> None:
    """Issue 20 (6): an id with a space, '/', 'ü' or '<' got 404 and no disconnect button."""
    odd = "cc odd/ü<b>"
    reasons: list[int] = []
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=odd, protocol=mqtt.MQTTv5)
    client.on_disconnect = lambda c, u, flags, reason, props: reasons.append(reason.value)
    client.connect("127.0.0.1", nodes[0].port)
    client.loop_start()
    try:
        wait_for(lambda: client.is_connected(), 10, "the client to connect")
        client.subscribe("cc/odd/#", qos=1)
        log_in(browser, nodes[0])
        until(browser, lambda d: d.find_elements(By.ID, "who"), "the overview")
        search_on(browser, nodes[0], "clients", "cc odd")
        link = until(browser, lambda d: next(
            (a for a in d.find_elements(By.CSS_SELECTOR, "#client-results a[data-client]")
             if a.get_attribute("data-client") == odd), None), "the client's link")
        link.click()
        until(browser, lambda d: "cc/odd/#" in d.find_element(
            By.ID, "detail-subscriptions").text, "its subscription in the details")
        disconnect_in_the_details(browser)
        wait_for(lambda: reasons, 10, "the client to be disconnected")
        assert reasons[0] == 0x98
    finally:
        client.loop_stop()
        client.disconnect()


def _backup_count(node: HiveProcess) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.ports['rest']}"
                                "/api/v1/management/backups", timeout=5) as answer:
        return len(json.load(answer)["items"])


def test_a_page_on_another_site_cannot_make_a_backup(nodes: list[HiveProcess],
                                                      browser: WebDriver) -> None:
    """Issue 20 (4): with <auth> off (loopback), another site's page made a backup on
    127.0.0.1's REST API with a no-cors POST."""
    target = f"http://127.0.0.1:{nodes[2].ports['rest']}/api/v1/management/backups"
    page = ("<!doctype html><title>waiting</title><script>"
            f"Promise.allSettled([fetch('{target}', {{method: 'POST', mode: 'no-cors'}}),"
            f" fetch('{target}', {{method: 'POST', mode: 'no-cors', body: '{{}}',"
            " headers: {'Content-Type': 'text/plain'}})])"
            ".then(() => { document.title = 'sent'; });</script>").encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    before = _backup_count(nodes[2])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        # "localhost" is another site than "127.0.0.1".
        browser.get(f"http://localhost:{server.server_address[1]}/")
        until(browser, lambda d: d.title == "sent", "the page's requests")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    time.sleep(0.5)
    assert _backup_count(nodes[2]) == before
