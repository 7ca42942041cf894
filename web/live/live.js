/* live.js: the live page. Every second it reads, through the stack's nginx only:
 *   - GET /stock?id=N for each watched product: the stock as MySQL has it (any instance
 *     answers; each reads the row), and beside it the product's reserved and paid orders
 *     and the units released (cancelled or expired), when the answer has them;
 *   - GET /lock/queue?id=N: the answering instance's view of the product's lock (the zk
 *     queue in order with who made each node, in which implementation, and whom it
 *     watches, a lease's holder);
 *   - GET /live-api/counters: Prometheus's raw samples of the last 20 s of every
 *     stockd's counters (the query is fixed in nginx/nginx.conf.in; rates are taken
 *     between a series' last two samples, so they follow whatever scrape interval the
 *     stack's Prometheus has);
 *   - GET /live-api/alerts: the state of StockdStockBelowZero;
 *   - GET /live-api/writer: the last 20 s of the order writers' own /metrics (job writer,
 *     mode redis-stock): the writer panel shows each one's lag (commit time minus the
 *     deduction's time, of its last batch's oldest entry), the stream entries it has
 *     not yet read and those read but not written, its orders per second and batch size.
 *   - GET /route/view and GET /route/owner?id=N (stockd --route owner): the answering
 *     instance's view (its number, members, circuits) and each watched product's owner;
 *     the panel stays hidden while the instances do not route by owner.
 * In mode redis-stock the drift panel plots, for each watched product, the count in Redis
 * (stockd_redis_stock) beside MariaDB's stock (the /stock read), and the order stream's
 * backlog (stockd_order_stream_backlog, undelivered + pending): the drift opens under load
 * and closes as the order writer catches up.
 * Page parameters: ?ids=1,2 (watched products, default 1), &queue=N (whose lock queue,
 * default the first), &window=S (seconds the charts keep, default 300).
 *
 * What the page has seen is also kept on the DOM as data-* attributes (the browser test
 * reads them): #instances[data-seen], #stock-now span[data-last][data-min] (and
 * [data-reserved][data-paid][data-released] when the /stock answer carries the
 * product's orders: reservations, docs/orders.md),
 * #queue-seen[data-best-waiters][data-best-owners], #alert[data-state],
 * #drift-now span[data-redis][data-mysql][data-backlog] (mode redis-stock),
 * #writer-now span[data-lag][data-pending][data-undelivered] (one per writer),
 * #route-view[data-view][data-members], #route-owners span[data-product][data-owner]. */
"use strict";

const params = new URLSearchParams(location.search);
const ids = (params.get("ids") || params.get("id") || "1")
  .split(",").map(Number).filter((n) => Number.isInteger(n) && n > 0).slice(0, 8);
const queueId = Number(params.get("queue")) || ids[0] || 1;
const windowS = Math.min(Math.max(Number(params.get("window")) || 300, 30), 3600);
const TICK_MS = 1000;
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

const $ = (id) => document.getElementById(id);

/* One colour per series name on every chart, in the order names are first seen. */
const colorOf = (() => {
  const given = new Map();
  return (key) => {
    if (!given.has(key)) given.set(key, COLORS[given.size % COLORS.length]);
    return given.get(key);
  };
})();
const errors = {};

/* ------------------------------------------------------------ fetching */

async function getJSON(url, okStatuses = [200]) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 4000);
  try {
    const r = await fetch(url, { cache: "no-store", signal: ctl.signal });
    const body = await r.json();
    if (!okStatuses.includes(r.status)) throw new Error(`${r.status} ${body.result || ""} ${body.message || ""}`);
    return body;
  } finally {
    clearTimeout(timer);
  }
}

function noteError(source, err) {
  if (err) errors[source] = `${source}: ${err.message || err}`;
  else delete errors[source];
  $("errors").textContent = Object.values(errors).join("; ");
}

/* ------------------------------------------------------------ charts */

/* A time chart whose series (one per key) appear as keys are first seen. Points are
 * aligned by tick: each push adds one x and a value or null for every series. */
class TimeChart {
  constructor(el, yLabel, opts = {}) {
    this.el = el;
    this.yLabel = yLabel;
    this.opts = opts;
    this.keys = [];
    this.xs = [];
    this.ys = [];
    this.plot = null;
  }
  push(t, values) {
    let grew = false;
    for (const k of Object.keys(values)) {
      if (!this.keys.includes(k)) {
        this.keys.push(k);
        this.ys.push(this.xs.map(() => null));
        grew = true;
      }
    }
    this.xs.push(t);
    this.keys.forEach((k, i) => this.ys[i].push(k in values ? values[k] : null));
    while (this.xs.length && this.xs[0] < t - windowS) {
      this.xs.shift();
      this.ys.forEach((y) => y.shift());
    }
    if (grew) {
      /* Series in name order, so that instances keep their place in every legend. */
      const order = this.keys.map((k, i) => [k, i]).sort((x, y) => x[0].localeCompare(y[0]));
      this.keys = order.map(([k]) => k);
      this.ys = order.map(([, i]) => this.ys[i]);
    }
    const data = [this.xs, ...this.ys];
    if (!this.plot || grew) this.make(data);
    else this.plot.setData(data);
  }
  make(data) {
    if (this.plot) this.plot.destroy();
    const width = Math.max(this.el.clientWidth, 300);
    this.plot = new uPlot({
      width, height: this.opts.height || 200,
      scales: { x: { time: true }, y: this.opts.y || {} },
      axes: [{}, { label: this.yLabel, size: 60 }],
      series: [{}, ...this.keys.map((k) => ({
        label: k, stroke: colorOf(k), width: 2, spanGaps: false,
        points: { show: false },
      }))],
    }, data, this.el);
  }
  resize() {
    if (this.plot) this.plot.setSize({ width: Math.max(this.el.clientWidth, 300), height: this.opts.height || 200 });
  }
}

const charts = {
  stock: new TimeChart($("chart-stock"), "units", { height: 240 }),
  rate: new TimeChart($("chart-rate"), "deductions/s", { y: { range: (u, lo, hi) => [0, Math.max(hi, 1)] } }),
  ops: new TimeChart($("chart-ops"), "ops/deduction", { y: { range: (u, lo, hi) => [0, Math.max(hi, 1)] } }),
  batch: new TimeChart($("chart-batch"), "deductions", { y: { range: (u, lo, hi) => [0, Math.max(hi, 1)] } }),
  drift: new TimeChart($("chart-drift"), "units / entries", { height: 240 }),
  writer: new TimeChart($("chart-writer"), "seconds / entries"),
};
window.addEventListener("resize", () => Object.values(charts).forEach((c) => c.resize()));

/* ------------------------------------------------------------ stock */

const stockSeen = {}; /* product -> {last, min} */

async function tickStock(t) {
  const values = {};
  await Promise.all(ids.map(async (id) => {
    try {
      const a = await getJSON(`/stock?id=${id}`);
      values[`product ${id}`] = a.stock;
      const s = stockSeen[id] || (stockSeen[id] = { last: a.stock, min: a.stock });
      s.last = a.stock;
      /* The order's life (docs/orders.md), in the same answer as the stock when stockd
       * reads it: the product's reserved and paid orders and the units released. */
      s.orders = a.reserved === undefined ? null :
        { reserved: a.reserved, paid: a.paid, released: a.released };
      s.min = Math.min(s.min, a.stock);
      noteError(`stock ${id}`, null);
    } catch (e) {
      noteError(`stock ${id}`, e);
    }
  }));
  charts.stock.push(t, values);
  const box = $("stock-now");
  box.replaceChildren(...ids.filter((id) => stockSeen[id]).map((id) => {
    const s = stockSeen[id];
    const span = document.createElement("span");
    span.className = "stock" + (s.last < 0 ? " oversold" : s.last === 0 ? " zero" : "");
    span.dataset.product = id;
    span.dataset.last = s.last;
    span.dataset.min = s.min;
    span.textContent = `product ${id}: ${s.last}`;
    if (s.orders) {
      Object.assign(span.dataset, s.orders);
      const o = document.createElement("small");
      o.className = "orders";
      o.textContent = ` (reserved ${s.orders.reserved}, paid ${s.orders.paid}, released ${s.orders.released})`;
      span.append(o);
    }
    return span;
  }));
}

/* ------------------------------------------------------------ lock queue */

let best = { waiters: 0, owners: [] };

function shortNode(n) {
  const i = n.indexOf("-lock-");
  return i > 0 ? `…${n.slice(i + 1)}` : n;
}

async function tickQueue() {
  let v;
  try {
    v = await getJSON(`/lock/queue?id=${queueId}`);
    noteError("queue", null);
  } catch (e) {
    noteError("queue", e);
    return;
  }
  $("mode").textContent = v.mode;
  $("queue-kind").textContent = v.path ? `${v.kind} at ${v.path}, as ${v.instance} sees it` : `(${v.mode})`;
  const entries = v.entries || [];
  const list = $("queue");
  list.replaceChildren(...entries.map((e) => {
    const li = document.createElement("li");
    li.className = e.holds ? "holds" : "waits";
    li.dataset.owner = e.owner || "";
    const who = document.createElement("b");
    who.textContent = e.owner || "(unknown)";
    const what = document.createElement("span");
    const node = e.seq !== undefined ? `#${e.seq}` : e.node;
    if (e.holds) {
      what.textContent = ` holds ${node}` +
        (v.lease_ms !== undefined && v.lease_ms >= 0 ? `, lease ${v.lease_ms} ms left` : "") +
        (e.token ? `, token ${e.token}` : "");
    } else {
      const prev = entries.find((p) => p.node === e.watches);
      what.textContent = ` waits at ${node}, watching ${prev && prev.seq !== undefined ? "#" + prev.seq : shortNode(e.watches || "")}` +
        (prev && prev.owner ? ` (${prev.owner})` : "");
    }
    li.append(who, what);
    if (e.impl) {
      // Who made the node (stockd, curator, kazoo, other), from its name: lockview.c.
      li.dataset.impl = e.impl;
      const impl = document.createElement("i");
      impl.textContent = ` [${e.impl}]`;
      li.append(impl);
    }
    li.title = e.node;
    return li;
  }));
  const note = v.view === "none" || v.view === "unavailable" ? v.message
    : entries.length === 0 ? "free: nobody holds or waits"
      : v.truncated ? `${v.total} in all, the first ${v.shown} shown` : "";
  $("queue-note").textContent = note;
  $("queue-product").textContent = queueId;

  const waiters = entries.filter((e) => !e.holds);
  const owners = [...new Set(waiters.map((e) => e.owner).filter(Boolean))].sort();
  if (owners.length > best.owners.length || (owners.length === best.owners.length && waiters.length > best.waiters)) {
    best = { waiters: waiters.length, owners };
  }
  const seen = $("queue-seen");
  seen.dataset.bestWaiters = best.waiters;
  seen.dataset.bestOwners = best.owners.join(" ");
  seen.textContent = `most waiters seen at once: ${best.waiters}` +
    (best.owners.length ? ` (from ${best.owners.join(", ")})` : "");
}

/* ------------------------------------------------------------ Prometheus */

const instancesSeen = new Set();

/* Sums the last two samples of each series by (target, key); returns
 * {target: {key: {last, prev, dt}}}. A counter that went down was reset: the
 * difference is then the new value. */
function lastTwo(result, keyOf) {
  const out = {};
  for (const s of result) {
    const key = keyOf(s.metric);
    if (key === null) continue;
    const v = s.values;
    if (!v.length) continue;
    const target = s.metric.instance;
    const o = (out[target] ||= {});
    const k = (o[key] ||= { last: 0, diff: 0, dt: 0 });
    const last = Number(v[v.length - 1][1]);
    k.last += last;
    if (v.length >= 2) {
      const prev = Number(v[v.length - 2][1]);
      k.diff += last >= prev ? last - prev : last;
      k.dt = Math.max(k.dt, v[v.length - 1][0] - v[v.length - 2][0]);
    }
  }
  return out;
}

async function tickPrometheus(t) {
  let r;
  try {
    r = await getJSON("/live-api/counters");
    noteError("prometheus", null);
  } catch (e) {
    noteError("prometheus", e);
    return;
  }
  const res = r.data.result;
  /* Each target's name (its stockd_info) among the targets scraped in the last 20 s. */
  const names = {};
  for (const s of res) {
    if (s.metric.__name__ === "stockd_info" && s.values.length) {
      names[s.metric.instance] = s.metric.exported_instance || s.metric.instance;
    }
  }
  const stat = lastTwo(res, (m) => {
    switch (m.__name__) {
      case "stockd_requests_total": return m.route === "/stock/reduce" ? `r:${m.result}` : null;
      case "stockd_zk_ops_total": case "stockd_lock_service_ops_total": return "ops";
      case "stockd_batch_size_sum": return "bsum";
      case "stockd_batch_size_count": return "bcount";
      case "stockd_route_forwarded_total": return "fwd";
      case "stockd_route_frames_total": return "frames";
      case "stockd_route_frame_deductions_total": return "framed";
      case "stockd_route_local_fallbacks_total": return "fallbacks";
      default: return null;
    }
  });
  const rate = {}, ops = {}, batch = {}, answers = {};
  for (const [target, k] of Object.entries(stat)) {
    const name = names[target] || target;
    const ded = k["r:deducted"];
    if (ded && ded.dt > 0) rate[name] = ded.diff / ded.dt;
    if (k.ops && ded && ded.diff > 0) ops[name] = k.ops.diff / ded.diff;
    if (k.bsum && k.bcount && k.bcount.diff > 0) batch[name] = k.bsum.diff / k.bcount.diff;
    answers[name] = Object.fromEntries(Object.entries(k).filter(([key]) => key.startsWith("r:"))
      .map(([key, v]) => [key.slice(2), v.last]));
  }
  renderRouteCounts(Object.fromEntries(Object.entries(stat).map(([target, k]) =>
    [names[target] || target, k])));
  tickDrift(t, res);
  charts.rate.push(t, rate);
  charts.ops.push(t, ops);
  charts.batch.push(t, batch);
  renderAnswers(answers);

  Object.values(names).forEach((n) => instancesSeen.add(n));
  const el = $("instances");
  const now = Object.values(names).sort();
  el.textContent = now.length ? now.join(", ") : "none scraped";
  el.dataset.now = now.join(" ");
  el.dataset.seen = [...instancesSeen].sort().join(" ");
}

/* Mode redis-stock's drift: the Redis count of each watched product and the backlog
 * (undelivered + pending), each from the freshest sample of any instance (every
 * instance's watch reads the same Redis), beside MariaDB's stock as tickStock read it. */
function tickDrift(t, res) {
  const freshest = {}; /* key -> [time, value] */
  for (const s of res) {
    if (!s.values.length) continue;
    const [at, v] = s.values[s.values.length - 1];
    let key = null;
    if (s.metric.__name__ === "stockd_redis_stock" && ids.includes(Number(s.metric.product))) {
      key = `redis ${s.metric.product}`;
    } else if (s.metric.__name__ === "stockd_order_stream_backlog") {
      key = `backlog ${s.metric.state}`;
    }
    if (key && (!freshest[key] || at > freshest[key][0])) freshest[key] = [at, Number(v)];
  }
  if (!Object.keys(freshest).length) return;
  $("drift-panel").hidden = false;
  const redis = (id) => freshest[`redis ${id}`]?.[1];
  const parts = ["backlog undelivered", "backlog pending"].filter((k) => freshest[k]);
  const backlog = parts.length ? parts.reduce((sum, k) => sum + freshest[k][1], 0) : null;
  const values = {};
  for (const id of ids) {
    if (redis(id) !== undefined) values[`redis ${id}`] = redis(id);
    if (stockSeen[id]) values[`mariadb ${id}`] = stockSeen[id].last;
  }
  if (backlog !== null) values.backlog = backlog;
  charts.drift.push(t, values);
  $("drift-now").replaceChildren(...ids.filter((id) => redis(id) !== undefined).map((id) => {
    const span = document.createElement("span");
    const mysql = stockSeen[id] ? stockSeen[id].last : null;
    span.className = "stock";
    span.dataset.product = id;
    span.dataset.redis = redis(id);
    span.dataset.mysql = mysql ?? "";
    span.dataset.backlog = backlog ?? "";
    span.textContent = `product ${id}: Redis ${redis(id)}, MariaDB ${mysql ?? "?"}` +
      (backlog !== null ? `, backlog ${backlog}` : "");
    return span;
  }));
}

function renderAnswers(answers) {
  const names = Object.keys(answers).sort();
  const results = [...new Set(names.flatMap((n) => Object.keys(answers[n])))].sort();
  const head = document.createElement("tr");
  head.append(...["instance", ...results].map((h) => {
    const th = document.createElement("th");
    th.textContent = h.replace(/_/g, " ");
    return th;
  }));
  $("answers").tHead.replaceChildren(head);
  $("answers").tBodies[0].replaceChildren(...names.map((n) => {
    const tr = document.createElement("tr");
    tr.dataset.instance = n;
    const td0 = document.createElement("td");
    td0.textContent = n;
    tr.append(td0, ...results.map((res) => {
      const td = document.createElement("td");
      td.className = `num result-${res}`;
      td.textContent = answers[n][res] !== undefined ? String(answers[n][res]) : "";
      return td;
    }));
    return tr;
  }));
}

async function tickAlert() {
  let r;
  try {
    r = await getJSON("/live-api/alerts");
    noteError("alerts", null);
  } catch (e) {
    noteError("alerts", e);
    const el = $("alert");
    el.textContent = "Prometheus unreachable";
    el.className = "state-unknown";
    el.dataset.state = "unknown";
    return;
  }
  const mine = r.data.alerts.filter((a) => a.labels.alertname === "StockdStockBelowZero");
  const firing = mine.filter((a) => a.state === "firing");
  const state = firing.length ? "firing" : mine.length ? "pending" : "inactive";
  const el = $("alert");
  el.dataset.state = state;
  el.className = `state-${state}`;
  el.textContent = state === "inactive" ? "StockdStockBelowZero inactive"
    : `StockdStockBelowZero ${state}: ` +
      (firing.length ? firing : mine).map((a) => `product ${a.labels.product} at ${Number(a.value)}`).join(", ");
}

/* The order writers (job writer): per writer, the gauges' last values and the rates of
 * its counters between their last two samples. */
async function tickWriter(t) {
  let r;
  try {
    r = await getJSON("/live-api/writer");
    noteError("writer", null);
  } catch (e) {
    noteError("writer", e);
    return;
  }
  const stat = lastTwo(r.data.result, (m) => m.__name__.replace(/^stock_writer_/, ""));
  if (!Object.keys(stat).length) return;
  $("writer-panel").hidden = false;
  const values = {};
  const spans = [];
  for (const [target, k] of Object.entries(stat).sort()) {
    const lag = k.last_lag_seconds?.last ?? null;
    const pending = k.pending_entries?.last ?? null;
    const undelivered = k.undelivered_entries?.last ?? null;
    const rate = k.orders_total && k.orders_total.dt > 0 ? k.orders_total.diff / k.orders_total.dt : null;
    const batch = k.batches_total?.diff > 0 ? k.batch_entries_total.diff / k.batches_total.diff : null;
    if (lag !== null) values[`lag s ${target}`] = lag;
    if (pending !== null && undelivered !== null) values[`backlog ${target}`] = pending + undelivered;
    const span = document.createElement("span");
    span.className = "stock";
    span.dataset.lag = lag ?? "";
    span.dataset.pending = pending ?? "";
    span.dataset.undelivered = undelivered ?? "";
    span.textContent = `${target}: lag ${lag === null ? "?" : lag.toFixed(2)} s, ` +
      `undelivered ${undelivered ?? "?"}, pending ${pending ?? "?"}` +
      (rate !== null ? `, ${rate.toFixed(0)} orders/s` : "") +
      (batch !== null ? `, batches of ${batch.toFixed(0)}` : "");
    spans.push(span);
  }
  charts.writer.push(t, values);
  $("writer-now").replaceChildren(...spans);
}

/* Owner routing: the view of whichever instance answers (each computes owners from
 * its own view; they agree once the view has settled), and each watched product's
 * owner. A stockd that does not route answers route "local" (or 404 before issue 40). */
async function tickRoute() {
  let v;
  try {
    v = await getJSON("/route/view");
  } catch (e) {
    $("route-panel").hidden = true;
    return;
  }
  if (v.route !== "owner") {
    $("route-panel").hidden = true;
    return;
  }
  $("route-panel").hidden = false;
  const members = (v.members || []).map((m) => (typeof m === "string" ? { address: m } : m));
  const el = $("route-view");
  el.textContent = String(v.view);
  el.dataset.view = String(v.view);
  el.dataset.members = members.map((m) => m.address).join(" ");
  $("route-source").textContent = v.source || "?";
  $("route-members").replaceChildren(...members.map((m) => {
    const b = document.createElement("b");
    b.textContent = m.address + (m.breaker_open ? " (circuit open)" : "") + " ";
    b.className = m.breaker_open ? "state-firing" : "";
    return b;
  }));
  const spans = [];
  for (const id of ids) {
    const span = document.createElement("span");
    span.dataset.product = id;
    try {
      const o = await getJSON(`/route/owner?id=${id}`);
      span.dataset.owner = o.owner;
      span.textContent = `product ${id} -> ${o.owner} `;
    } catch (e) {
      span.textContent = `product ${id} -> ? `;
    }
    spans.push(span);
  }
  $("route-owners").replaceChildren(...spans);
}

function renderRouteCounts(byName) {
  const rows = Object.keys(byName).sort().filter((n) => ["fwd", "frames", "framed", "fallbacks"]
    .some((k) => byName[n][k]));
  $("route-counts").tBodies[0].replaceChildren(...rows.map((n) => {
    const tr = document.createElement("tr");
    tr.dataset.instance = n;
    tr.append(...[n, ...["fwd", "frames", "framed", "fallbacks"].map((k) =>
      (byName[n][k] ? String(byName[n][k].last) : "0"))].map((text, i) => {
      const td = document.createElement("td");
      if (i) td.className = "num";
      td.textContent = text;
      return td;
    }));
    return tr;
  }));
}

/* ------------------------------------------------------------ the loop */

let busy = false;

async function tick() {
  if (busy) return; /* a slow tick is skipped, never stacked */
  busy = true;
  const t = Math.round(Date.now() / 1000);
  try {
    await Promise.all([tickStock(t), tickQueue(), tickPrometheus(t), tickAlert(), tickWriter(t),
      tickRoute()]);
    $("clock").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.ticks = String(Number(document.body.dataset.ticks || 0) + 1);
  } finally {
    busy = false;
  }
}

$("products").textContent = `(product${ids.length > 1 ? "s" : ""} ${ids.join(", ")})`;
tick();
setInterval(tick, TICK_MS);
