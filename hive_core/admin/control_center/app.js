// The Hive control center: one page per hash (#overview, #clients, ...), each filled from the
// node's JSON API under /cc/api. Plain DOM and SVG: nothing to build, nothing to download.
"use strict";

const API = "/cc/api";
const ACTION_HEADER = "X-Hive-Control-Center";
let timer = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function cell(value) {
  return el("td", {text: value === null || value === undefined ? "-" : String(value)});
}

async function call(path, options) {
  const response = await fetch(API + path, Object.assign({credentials: "same-origin"}, options));
  if (response.status === 401) {
    window.location.href = "/login";
    throw new Error("logged out");
  }
  const body = await response.json();
  if (!response.ok) throw new Error(body.detail || response.statusText);
  return body;
}

function post(path) {
  return call(path, {method: "POST", headers: {[ACTION_HEADER]: "1"}});
}

function showError(error) {
  const box = document.getElementById("error");
  box.textContent = error ? String(error.message || error) : "";
  box.hidden = !error;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// ------------------------------------------------------------------------------ overview

const SVG = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

// One node's messages in and out per second over the sampled minutes: two coloured lines, a
// y axis in messages/s (0 and the top), a time axis (the window's start and "now"), a legend.
function chart(node) {
  const width = 560, height = 170, left = 48, right = 12, top = 26, bottom = 28;
  const points = node.series;
  const svg = svgEl("svg", {viewBox: `0 0 ${width} ${height}`, class: "chart", "data-node": node.id});
  svg.append(svgEl("text", {x: left, y: 14, class: "title"},
    `${node.id}${node.this_node ? " (this node)" : ""}`));
  const legend = svgEl("text", {x: width - right, y: 14, "text-anchor": "end", class: "legend"});
  legend.append(svgEl("tspan", {class: "key-in"}, "━ in"), svgEl("tspan", {dx: 10, class: "key-out"}, "━ out"),
    svgEl("tspan", {dx: 10}, "(messages/s)"));
  svg.append(legend);
  const x0 = left, x1 = width - right, y0 = height - bottom, y1 = top;
  svg.append(svgEl("line", {x1: x0, y1: y0, x2: x1, y2: y0, class: "axis x-axis"}),
    svgEl("line", {x1: x0, y1: y0, x2: x0, y2: y1, class: "axis y-axis"}));
  const peak = Math.max(1, ...points.map((p) => Math.max(p[1], p[2])));
  const ticks = [[0, "0"], [peak, peak >= 100 ? String(Math.round(peak)) : peak.toFixed(1)]];
  for (const [value, label] of ticks) {
    const y = y0 - (value / peak) * (y0 - y1);
    svg.append(svgEl("text", {x: x0 - 4, y: y + 4, "text-anchor": "end", class: "y-tick"}, label));
  }
  svg.append(svgEl("text", {x: 12, y: (y0 + y1) / 2, "text-anchor": "middle", class: "unit",
    transform: `rotate(-90 12 ${(y0 + y1) / 2})`}, "msg/s"));
  if (points.length < 2) {
    svg.append(svgEl("text", {x: (x0 + x1) / 2, y: (y0 + y1) / 2, "text-anchor": "middle"}, "collecting samples"));
    return svg;
  }
  const t0 = points[0][0], t1 = points[points.length - 1][0];
  const span = Math.max(1, t1 - t0);
  const x = (t) => x0 + ((t - t0) / span) * (x1 - x0);
  const y = (v) => y0 - (v / peak) * (y0 - y1);
  const ago = span >= 120 ? `-${Math.round(span / 60)} min` : `-${Math.round(span)} s`;
  svg.append(svgEl("text", {x: x0, y: y0 + 16, "text-anchor": "start", class: "x-tick"}, ago),
    svgEl("text", {x: x1, y: y0 + 16, "text-anchor": "end", class: "x-tick"}, "now"),
    svgEl("text", {x: (x0 + x1) / 2, y: y0 + 16, "text-anchor": "middle", class: "unit"}, "time"));
  for (const [index, css] of [[1, "line-in"], [2, "line-out"]]) {
    svg.append(svgEl("polyline", {class: css,
      points: points.map((p) => `${x(p[0]).toFixed(1)},${y(p[index]).toFixed(1)}`).join(" ")}));
  }
  return svg;
}

async function overview() {
  const data = await call("/overview");
  const rows = data.nodes.map((node) => {
    const row = el("tr", {"data-node": node.id, class: node.state.toLowerCase()},
      el("td", {text: node.id + (node.this_node ? " (this node)" : "")}), cell(node.state),
      cell(node.version), cell(node.address), cell(node.connections), cell(node.sessions),
      cell(node.messages_in_per_second), cell(node.messages_out_per_second));
    return row;
  });
  fill(document.querySelector("#nodes tbody"), rows);
  document.getElementById("charts").replaceChildren(...data.nodes.map(chart));
  const replication = document.getElementById("replication");
  const r = data.replication;
  replication.replaceChildren(...(r ? [
    el("dt", {text: "Replica count"}), el("dd", {text: String(r.replica_count)}),
    el("dt", {text: "This node's backups"}), el("dd", {text: r.backups.join(", ") || "none"}),
    el("dt", {text: "Replicas held here"}), el("dd", {text: r.replicas_held.join(", ") || "none"}),
    el("dt", {text: "Replication lag (ops)"}),
    el("dd", {text: Object.entries(r.lag).map(([n, v]) => `${n}: ${v}`).join(", ") || "0"}),
    el("dt", {text: "Takeovers, merges"}), el("dd", {text: `${r.takeovers}, ${r.merges}`}),
  ] : [el("dt", {text: "Not clustered"})]));
  const pair = (q) => (q ? `${millis(q[0])} / ${millis(q[1])}` : "-");
  fill(document.querySelector("#latency tbody"), (data.latency || []).map((row) =>
    el("tr", {"data-node": row.node}, cell(row.node), cell(pair(row.delivery)),
      cell(pair(row.forward_ack)), cell(pair(row.replication_ack)), cell(row.delivered))));
}

function millis(seconds) {
  if (seconds === null) return "-";
  if (seconds === "inf") return "> 10 s";
  return seconds < 0.001 ? `≤ ${seconds * 1000} ms` : `≤ ${+(seconds * 1000).toFixed(1)} ms`;
}

// ------------------------------------------------------------------------------ clients

async function searchClients(event) {
  if (event) event.preventDefault();
  const text = document.getElementById("client-search").value;
  const data = await call("/clients?q=" + encodeURIComponent(text));
  const rows = data.items.map((item) => {
    const link = el("a", {href: "#clients", text: item.client_id, "data-client": item.client_id});
    link.addEventListener("click", (e) => { e.preventDefault(); clientDetails(item); });
    return el("tr", {"data-client": item.client_id}, el("td", {}, link), cell(item.node),
      cell(item.connected), cell(item.persistent), cell(item.subscriptions), cell(item.queued),
      cell(item.inflight));
  });
  fill(document.querySelector("#client-results tbody"), rows);
}

async function clientDetails(item) {
  const box = document.getElementById("client-details");
  document.getElementById("detail-id").textContent = item.client_id;
  document.getElementById("disconnect-result").textContent = "";
  box.hidden = false;
  const fields = document.getElementById("detail-fields");
  const button = document.getElementById("disconnect");
  button.dataset.client = item.client_id;
  let details;
  try {
    // The node that holds the session answers through this one (the node link).
    details = await call("/clients/" + encodeURIComponent(item.client_id));
  } catch (error) {
    fields.replaceChildren(el("dt", {text: "Node"}), el("dd", {text: `${item.node} (it did not answer: ${error.message})`}));
    fill(document.querySelector("#detail-subscriptions tbody"), []);
    button.hidden = true;
    return;
  }
  button.hidden = !details.connected || !details.here;
  if (details.connected && !details.here) {
    document.getElementById("disconnect-result").textContent =
      `Connected to node ${details.node}: disconnect it from that node's control center.`;
  }
  const shown = ["node", "connected", "persistent", "protocol_version", "remote_address",
    "username", "listener", "session_expiry_interval", "queued", "inflight", "disconnected_at", "will"];
  fields.replaceChildren(...shown.flatMap((key) => [el("dt", {text: key.replaceAll("_", " ")}),
    el("dd", {text: details[key] === null ? "-" : String(details[key])})]));
  fill(document.querySelector("#detail-subscriptions tbody"), details.subscription_list.map((s) =>
    el("tr", {}, cell(s.topic_filter), cell(s.qos), cell(s.no_local), cell(s.retain_as_published),
      cell(s.subscription_id))));
}

async function disconnect() {
  const button = document.getElementById("disconnect");
  const id = button.dataset.client;
  if (!window.confirm(`Disconnect ${id}?`)) return;
  try {
    await post("/clients/" + encodeURIComponent(id) + "/disconnect");
    document.getElementById("disconnect-result").textContent = `${id} disconnected`;
    button.hidden = true;
    await searchClients();
  } catch (error) {
    document.getElementById("disconnect-result").textContent = String(error.message);
  }
}

// ------------------------------------------------------------------------------ retained, subscriptions

async function searchRetained(event) {
  if (event) event.preventDefault();
  const text = document.getElementById("retained-search").value;
  const data = await call("/retained?q=" + encodeURIComponent(text));
  document.getElementById("retained-count").textContent =
    `${data.matching} of ${data.total} retained messages match`;
  fill(document.querySelector("#retained-results tbody"), data.items.map((m) =>
    el("tr", {"data-topic": m.topic}, cell(m.topic), cell(m.qos), cell(m.bytes), cell(m.payload),
      cell(m.publisher))));
}

async function searchSubscriptions(event) {
  if (event) event.preventDefault();
  const text = document.getElementById("subscriptions-search").value;
  const data = await call("/subscriptions?q=" + encodeURIComponent(text));
  fill(document.querySelector("#subscriptions-local tbody"), data.local.map((s) =>
    el("tr", {}, cell(s.topic_filter), cell(s.sessions))));
  fill(document.querySelector("#subscriptions-remote tbody"), Object.entries(data.remote).map(
    ([node, filters]) => el("tr", {"data-node": node}, cell(node), cell(filters.join(", ") || "-"))));
}

// ------------------------------------------------------------------------------ backups

function progress(backup) {
  const r = backup.restore;
  if (!r) return backup.state;
  return `${r.records_read} of ${r.records_total} records read; ${r.sessions_imported} sessions, ` +
    `${r.retained_imported} retained messages imported`;
}

async function backups() {
  const data = await call("/management/backups");
  fill(document.querySelector("#backups tbody"), data.items.map((b) => {
    const actions = el("td", {});
    if (b.file) actions.append(el("a", {href: `${API}/backups/${b.id}/file`, text: "Download"}), " ");
    if (b.state === "COMPLETED" || b.state === "RESTORE_COMPLETED" || b.state === "RESTORE_FAILED") {
      const button = el("button", {type: "button", text: "Import", "data-backup": b.id});
      button.addEventListener("click", async () => {
        if (!window.confirm(`Import backup ${b.id} into this node?`)) return;
        try { await post("/management/backups/" + b.id); showError(null); } catch (error) { showError(error); }
        await backups();
      });
      actions.append(button);
    }
    const counts = b.counts ? `${b.counts.sessions} sessions, ${b.counts.retained} retained` : "-";
    return el("tr", {"data-backup": b.id}, cell(b.id), cell(b.state), cell(b.created),
      cell(b.bytes), cell(counts), cell(progress(b)), actions);
  }));
}

async function uploadBackup() {
  const file = document.getElementById("backup-file").files[0];
  const message = document.getElementById("backup-message");
  if (!file) { message.textContent = "Choose a .backup file first."; return; }
  message.textContent = `Uploading ${file.name}...`;
  try {
    const answer = await call("/backups/upload", {method: "POST", body: file,
      headers: {[ACTION_HEADER]: "1", "Content-Type": "application/octet-stream"}});
    message.textContent = `${file.name} uploaded as backup ${answer.backup.id}: import it below.`;
  } catch (error) {
    message.textContent = `${file.name} was not taken: ${error.message}`;
  }
  await backups();
}

async function createBackup() {
  try { await post("/management/backups"); showError(null); } catch (error) { showError(error); }
  await backups();
}

// ------------------------------------------------------------------------------ extensions

async function extensions() {
  const data = await call("/extensions");
  fill(document.querySelector("#extensions tbody"), data.items.map((x) =>
    el("tr", {"data-extension": x.name}, cell(x.name), cell(x.version), cell(x.source),
      cell(x.active ? "yes" : "no"), cell(x.failures), cell(x.reason))));
}

// ------------------------------------------------------------------------------ pages

const PAGES = {
  overview: {load: overview, every: 2000},
  clients: {load: searchClients},
  retained: {load: searchRetained},
  subscriptions: {load: searchSubscriptions},
  backups: {load: backups, every: 1000},
  extensions: {load: extensions},
};

async function run(page) {
  try { await PAGES[page].load(); showError(null); } catch (error) { if (error.message !== "logged out") showError(error); }
}

function show() {
  const page = (window.location.hash || "#overview").slice(1);
  const name = PAGES[page] ? page : "overview";
  for (const section of document.querySelectorAll(".page")) section.hidden = section.id !== "page-" + name;
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("current", link.dataset.page === name);
  if (timer) clearInterval(timer);
  timer = PAGES[name].every ? setInterval(() => run(name), PAGES[name].every) : null;
  run(name);
}

window.addEventListener("hashchange", show);
window.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("client-search-form").addEventListener("submit", (e) => { e.preventDefault(); run("clients"); });
  document.getElementById("retained-search-form").addEventListener("submit", (e) => { e.preventDefault(); run("retained"); });
  document.getElementById("subscriptions-search-form").addEventListener("submit", (e) => { e.preventDefault(); run("subscriptions"); });
  document.getElementById("disconnect").addEventListener("click", disconnect);
  document.getElementById("backup-create").addEventListener("click", createBackup);
  document.getElementById("backup-upload").addEventListener("click", uploadBackup);
  try {
    const me = await call("/me");
    document.getElementById("who").textContent = me.user;
    document.getElementById("this-node").textContent = me.node_id;
  } catch (error) { return; }
  show();
});
