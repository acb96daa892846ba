// The gpupool web view: renders the server's WebState documents (views.gpupool.io/v1, the JSON
// of `gpupool status|queue|leases -o json`) and keeps them live over server-sent events: the
// whole document first (`state`), then what changed in it (`patch`, JSON Patch operations the page
// applies to the document it holds; server.py's `_stream`, delta.py).
// No framework and no CDN: the page works offline. It computes nothing the server did not send;
// it only picks and draws. Routes: #/ (pool), #/tenant/NAME, #/node/NAME.
"use strict";

const GiB = 1024 ** 3;
const ANONYMOUS = "system:anonymous";
const MAX_NODES = 200; // on the pool page; the rest are a count and a link to each node page
const $ = (id) => document.getElementById(id);
let stream = null;
let held = null; // {version, doc}: the document the stream sent last, patches apply to it

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "style") node.setAttribute("style", value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  if (n === 0) return "0";
  if (n % GiB === 0 || n >= 10 * GiB) return `${Math.round(n / GiB)}Gi`;
  return `${(n / GiB).toFixed(1)}Gi`;
}

function amount(value, resource) {
  if (value === null || value === undefined) return "-";
  return resource === "gpu" ? `${(value / 1000).toFixed(2).replace(/\.?0+$/, "")} GPU` : bytes(value);
}

function pct(x) {
  return x === null || x === undefined ? "-" : `${(100 * x).toFixed(1)}%`;
}

// Tenants get well-apart colours in the order the server lists them (by name), so two tenants on
// one page never share one; a tenant the list does not name gets one from its name.
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22", "#393b79"];
let colours = new Map();

function colour(tenant) {
  if (!tenant) return "";
  if (colours.has(tenant)) return colours.get(tenant);
  let h = 0;
  for (const c of tenant) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${h % 360}, 55%, 45%)`;
}

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "tenant" && parts[1]) return { page: "tenant", tenant: parts[1] };
  if (parts[0] === "node" && parts[1]) return { page: "node", node: parts[1] };
  return { page: "pool" };
}

function query(r) {
  const q = new URLSearchParams();
  if (r.tenant) q.set("tenant", r.tenant);
  if (r.node) q.set("node", r.node);
  const s = q.toString();
  return s ? `?${s}` : "";
}

function showMessage(doc) {
  const box = $("message");
  box.hidden = false;
  box.dataset.code = doc.code;
  box.textContent = `${doc.code} ${doc.reason}: ${doc.message}`;
  $("view").replaceChildren();
  $("login").hidden = doc.code !== 401;
}

function clearMessage() {
  $("message").hidden = true;
  $("message").textContent = "";
  $("login").hidden = true;
}

function setLive(state) {
  $("live").dataset.state = state;
  $("live").textContent = state;
}

// ---- drawing ------------------------------------------------------------------------------

function sliceBox(s, card) {
  const left = (100 * s.offsetBytes) / card.memoryBytes;
  const width = Math.max(0.5, (100 * s.sizeBytes) / card.memoryBytes);
  const hidden = !s.tenant;
  const label = hidden ? "another tenant" : `${s.pod} (${s.tenant}, ${bytes(s.sizeBytes)}, ${s.phase})`;
  return el(
    "div",
    {
      class: `slice${hidden ? " hidden" : ""}${s.borrowed ? " borrowed" : ""}`,
      "data-lease": s.lease,
      "data-pod": s.pod,
      "data-tenant": s.tenant,
      "data-size": s.sizeBytes,
      title: label,
      style: `left:${left}%;width:${width}%;${hidden ? "" : `background:${colour(s.tenant)}`}`,
    },
    hidden ? "" : s.pod.split("/").pop(),
  );
}

function cardBox(node, card, big) {
  return el(
    "div",
    {
      class: `card${card.healthy ? "" : " unhealthy"}`,
      "data-node": node.name,
      "data-card": card.index,
      "data-free": card.freeBytes,
      "data-fragmentation": card.fragmentation,
    },
    el("span", { class: "card-label" }, `GPU ${card.index}`),
    el("div", { class: "bar" }, card.slices.map((s) => sliceBox(s, card))),
    el(
      "span",
      { class: "card-figures" },
      `${card.model} · free ${bytes(card.freeBytes)} · frag ${pct(card.fragmentation)}`,
    ),
    big
      ? el(
          "ul",
          { class: "slice-list" },
          card.slices.map((s) =>
            el(
              "li",
              {},
              el("i", { class: "swatch", style: `background:${colour(s.tenant)}` }),
              s.tenant
                ? [
                    `${s.pod} `,
                    el("a", { href: `#/tenant/${encodeURIComponent(s.tenant)}` }, s.tenant),
                    ` ${bytes(s.sizeBytes)} ${s.phase}${s.borrowed ? " borrowed" : ""}`,
                  ]
                : `another tenant's slice, ${bytes(s.sizeBytes)}`,
            ),
          ),
        )
      : null,
  );
}

function nodeBox(node, big = false) {
  return el(
    "section",
    { class: `node health-${node.health}`, "data-node": node.name, "data-health": node.health },
    el(
      "h3",
      {},
      el("a", { href: `#/node/${encodeURIComponent(node.name)}` }, node.name),
      el("span", { class: "health" }, node.health),
      node.condition ? el("span", { class: "condition" }, node.condition) : null,
    ),
    node.cards.map((c) => cardBox(node, c, big)),
  );
}

function ordered(nodes) {
  const used = (n) => n.cards.reduce((a, c) => a + c.usedBytes, 0);
  const bad = (n) => (n.health === "Healthy" && !n.condition ? 1 : 0);
  return [...nodes].sort((a, b) => bad(a) - bad(b) || used(b) - used(a) || (a.name < b.name ? -1 : 1));
}

function poolMap(status) {
  const nodes = ordered(status.nodes);
  const shown = nodes.slice(0, MAX_NODES);
  return el(
    "div",
    { id: "pool-map", class: "pool-map" },
    shown.map((n) => nodeBox(n)),
    nodes.length > shown.length
      ? el("p", { class: "more" }, `${nodes.length - shown.length} more nodes (idle first left out); open a node by its name: #/node/NAME`)
      : null,
  );
}

function totalsLine(status) {
  const t = status.totals;
  const health = t.byHealth.map(([h, n]) => `${n} ${h}`).join(", ");
  return el(
    "p",
    { id: "totals", class: "totals" },
    `${t.nodes} nodes, ${t.cards} cards (${t.models.join(", ") || "-"}); memory ${bytes(t.memoryBytes)}: ` +
      `used ${bytes(t.usedBytes)}, free ${bytes(t.freeBytes)}, fragmentation ${pct(t.fragmentation)}; ` +
      `${t.slices} slices; ${health || "no nodes"}`,
  );
}

function quotaBar(t) {
  const nominal = t.nominal || 0;
  const used = t.used ?? 0;
  const width = nominal ? Math.min(100, (100 * used) / nominal) : 0;
  const over = nominal && used > nominal ? Math.min(100, (100 * (used - nominal)) / nominal) : 0;
  const mark = nominal && t.guaranteed ? (100 * t.guaranteed) / nominal : null;
  return el(
    "div",
    {
      class: "quota",
      "data-tenant": t.name,
      "data-used": t.used,
      "data-nominal": t.nominal,
      "data-borrowed": t.borrowed,
      "data-lent": t.lent,
    },
    el(
      "div",
      { class: "quota-bar" },
      el("div", { class: "quota-used", style: `width:${width}%;background:${colour(t.name)}` }),
      over ? el("div", { class: "quota-over", style: `width:${over}%` }) : null,
      mark !== null ? el("div", { class: "quota-guaranteed", style: `left:${Math.min(100, mark)}%` }) : null,
    ),
    el(
      "span",
      { class: "quota-text" },
      t.used === null
        ? "no quota status yet"
        : `used ${amount(t.used, t.resource)} of nominal ${amount(t.nominal, t.resource)}` +
            (t.borrowed ? `, borrowed ${amount(t.borrowed, t.resource)}` : "") +
            (t.lent ? `, lent ${amount(t.lent, t.resource)}` : ""),
    ),
  );
}

function budgetBar(t) {
  if (!t.budgetHours) return null;
  const used = t.hoursUsed ?? 0;
  const days = (t.budgetWindowS || 0) / 86400;
  return el(
    "div",
    { class: "budget", "data-tenant": t.name, "data-hours-used": used, "data-budget": t.budgetHours },
    el(
      "div",
      { class: "quota-bar" },
      el("div", { class: "budget-used", style: `width:${Math.min(100, (100 * used) / t.budgetHours)}%` }),
    ),
    el("span", { class: "quota-text" }, `budget: ${used.toFixed(1)} of ${t.budgetHours} hours this ${days ? `${days}d` : ""} window`),
  );
}

function tenantsTable(tenants) {
  return el(
    "table",
    { id: "tenants", class: "tenants" },
    el("tr", {}, ["tenant", "quota", "leases", "queued", "GiB-hours"].map((h) => el("th", {}, h))),
    tenants.map((t) =>
      el(
        "tr",
        { "data-tenant": t.name },
        el("td", {}, el("i", { class: "swatch", style: `background:${colour(t.name)}` }), el("a", { href: `#/tenant/${encodeURIComponent(t.name)}` }, t.name)),
        el("td", {}, quotaBar(t), budgetBar(t)),
        el("td", {}, t.liveLeases),
        el("td", {}, t.queued + t.scheduling),
        el("td", {}, t.gibHours.toFixed(1)),
      ),
    ),
  );
}

function queueTable(items) {
  if (!items.length) return el("p", { id: "queue", class: "empty" }, "nothing waits");
  return el(
    "table",
    { id: "queue", class: "queue" },
    el("tr", {}, ["#", "pod", "tenant", "stage", "memory", "waited", "reason"].map((h) => el("th", {}, h))),
    items.map((q) =>
      el(
        "tr",
        { class: "queued", "data-pod": q.pod, "data-tenant": q.tenant, "data-position": q.position, "data-stage": q.stage },
        el("td", {}, q.position ? `${q.position}${q.of ? ` of ${q.of}` : ""}` : "-"),
        el("td", {}, q.pod),
        el("td", {}, q.tenant),
        el("td", {}, q.stage),
        el("td", {}, q.memoryBytes === null ? `${q.gpus} GPU` : `${q.gpus}×${bytes(q.memoryBytes)}`),
        el("td", {}, `${Math.round(q.waitedS)}s`),
        el("td", {}, q.reason),
      ),
    ),
  );
}

function leasesTable(leases) {
  const rows = [...leases.live, ...leases.recent];
  if (!rows.length) return el("p", { id: "leases", class: "empty" }, "no leases");
  return el(
    "table",
    { id: "leases", class: "leases" },
    el("tr", {}, ["pod", "node", "cards", "memory", "phase", "held", "GiB-hours"].map((h) => el("th", {}, h))),
    rows.map((x) =>
      el(
        "tr",
        { "data-lease": x.lease, "data-pod": x.pod, "data-phase": x.phase },
        el("td", {}, x.pod),
        el("td", {}, el("a", { href: `#/node/${encodeURIComponent(x.node)}` }, x.node)),
        el("td", {}, x.cards.join(",")),
        el("td", {}, bytes(x.memoryBytes)),
        el("td", {}, x.phase + (x.borrowed ? " (borrowed)" : "")),
        el("td", {}, `${(x.heldS / 3600).toFixed(2)}h`),
        el("td", {}, x.gibHours.toFixed(2)),
      ),
    ),
  );
}

function render(doc, r) {
  const status = doc.status;
  colours = new Map(status.tenants.map((t, i) => [t.name, PALETTE[i % PALETTE.length]]));
  $("who").textContent = doc.user + (doc.operator ? " (operator)" : "");
  $("who").dataset.user = doc.user;
  $("tenant-links").replaceChildren(
    ...status.tenants.map((t) => el("a", { href: `#/tenant/${encodeURIComponent(t.name)}` }, t.name)),
  );
  const view = $("view");
  view.dataset.page = r.page;
  if (r.page === "tenant") {
    const t = status.tenants.find((x) => x.name === r.tenant);
    view.replaceChildren(
      el("h2", {}, `tenant ${r.tenant}`),
      t
        ? el(
            "div",
            { class: "tenant-summary" },
            quotaBar(t),
            budgetBar(t),
            el(
              "p",
              {},
              `guaranteed ${amount(t.guaranteed, t.resource)}, borrow limit ${amount(t.borrowLimit, t.resource)}, ` +
                `lend limit ${amount(t.lendLimit, t.resource)}, cohort ${t.cohort || "-"}; ` +
                `${t.liveLeases} live leases holding ${bytes(t.memoryBytes)}; ${t.gibHours.toFixed(1)} GiB-hours`,
            ),
          )
        : null,
      el("h3", {}, "queue"),
      queueTable(doc.queue.items),
      el("h3", {}, "leases"),
      leasesTable(doc.leases),
      el("h3", {}, "its slices"),
      poolMap(status),
    );
  } else if (r.page === "node") {
    const node = status.nodes.find((n) => n.name === r.node);
    view.replaceChildren(el("h2", {}, `node ${r.node}`), node ? nodeBox(node, true) : null);
  } else {
    view.replaceChildren(
      totalsLine(status),
      el("h2", {}, "tenants"),
      tenantsTable(status.tenants),
      el("h2", {}, "queue"),
      queueTable(doc.queue.items),
      el("h2", {}, "pool"),
      poolMap(status),
    );
  }
  $("notes").replaceChildren(...status.notes.map((n) => el("p", { class: "note" }, n)));
  document.body.dataset.version = String((Number(document.body.dataset.version) || 0) + 1);
}

// ---- patches (delta.py: add, remove, replace; JSON Pointer paths) -------------------------

class PatchFailed extends Error {}

function applyPatch(doc, ops) {
  // In place: the page's document is its own (parsed from the stream), nothing else holds it.
  for (const op of ops) {
    if (op.path === "") {
      if (op.op === "remove") throw new PatchFailed("cannot remove the whole document");
      doc = op.value;
      continue;
    }
    const parts = op.path.slice(1).split("/").map((p) => p.replaceAll("~1", "/").replaceAll("~0", "~"));
    let parent = doc;
    for (const part of parts.slice(0, -1)) {
      if (parent === null || typeof parent !== "object" || !(part in parent)) throw new PatchFailed(`no ${op.path}`);
      parent = parent[part];
    }
    const last = parts[parts.length - 1];
    if (Array.isArray(parent)) {
      const index = Number(last);
      const size = parent.length + (op.op === "add" ? 1 : 0);
      if (!/^\d+$/.test(last) || index >= size) throw new PatchFailed(`no ${op.path}`);
      if (op.op === "add") parent.splice(index, 0, op.value);
      else if (op.op === "remove") parent.splice(index, 1);
      else if (op.op === "replace") parent[index] = op.value;
      else throw new PatchFailed(`unknown op ${op.op}`);
    } else if (parent !== null && typeof parent === "object") {
      if (op.op !== "add" && !(last in parent)) throw new PatchFailed(`no ${op.path}`);
      if (op.op === "remove") delete parent[last];
      else if (op.op === "add" || op.op === "replace") parent[last] = op.value;
      else throw new PatchFailed(`unknown op ${op.op}`);
    } else {
      throw new PatchFailed(`no ${op.path}`);
    }
  }
  return doc;
}

function count(name) {
  document.body.dataset[name] = String((Number(document.body.dataset[name]) || 0) + 1);
}

// ---- data ---------------------------------------------------------------------------------

async function load() {
  if (stream) stream.close();
  stream = null;
  held = null;
  const r = route();
  let response;
  try {
    response = await fetch(`/api/v1/state${query(r)}`, { credentials: "same-origin" });
  } catch (err) {
    showMessage({ code: 0, reason: "Unreachable", message: `the gpupool web server cannot be reached (${err})` });
    return;
  }
  const doc = await response.json();
  if (!response.ok) {
    showMessage(doc);
    $("logout").hidden = doc.code === 401;
    setLive("stopped");
    return;
  }
  clearMessage();
  $("logout").hidden = doc.user === ANONYMOUS;
  $("login-open").hidden = doc.user !== ANONYMOUS; // dev clusters (--dev-insecure) only
  render(doc, r);
  stream = new EventSource(`/api/v1/events${query(r)}`);
  stream.addEventListener("open", () => setLive("live"));
  stream.addEventListener("error", () => setLive("reconnecting"));
  stream.addEventListener("state", (e) => {
    setLive("live");
    held = { version: Number(e.lastEventId), doc: JSON.parse(e.data) };
    count("states");
    render(held.doc, r);
  });
  stream.addEventListener("patch", (e) => {
    const patch = JSON.parse(e.data);
    if (!held || patch.base !== held.version) {
      // not the document this page holds (nothing may be drawn from a wrong one): start over
      count("resyncs");
      load();
      return;
    }
    try {
      held = { version: patch.version, doc: applyPatch(held.doc, patch.ops) };
    } catch (err) {
      count("resyncs");
      load();
      return;
    }
    count("patches");
    setLive("live");
    render(held.doc, r);
  });
  stream.addEventListener("failure", (e) => {
    stream.close();
    setLive("stopped");
    showMessage(JSON.parse(e.data));
  });
}

$("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  const response = await fetch("/api/v1/login", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: $("token").value.trim() }),
    credentials: "same-origin",
  });
  if (!response.ok) {
    showMessage(await response.json());
    return;
  }
  $("token").value = "";
  $("login").hidden = true;
  load();
});

$("login-open").addEventListener("click", () => {
  $("login").hidden = false;
  $("token").focus();
});

$("logout").addEventListener("click", async () => {
  await fetch("/api/v1/logout", { method: "POST", credentials: "same-origin" });
  load();
});

window.addEventListener("hashchange", load);
load();
