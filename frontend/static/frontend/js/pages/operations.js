/**
 * The operator dashboard: live KPIs, the restaurant dashboard (orders, sales,
 * top-3 dishes for 1 h / 24 h / 7 d with the change against the period before,
 * and a chart), time-in-status percentiles, stuck orders, and a map on which
 * the operator draws an area to see the deliveries in transit inside it, and the
 * fleet map (every courier on the road, moving; fleet-map.js).
 *
 * Live: /ws/operations/ pushes every order's status change; the aggregate panels
 * (queries over Pinot) refresh a moment after a change, once per burst. Figures
 * that move with the clock alone (time in status, stuck orders) also refresh
 * every minute while the tab is visible.
 */
import { api } from "../api.js";
import { orderUrl } from "../config.js";
import { announce, emptyState, errorState, h, loadingState, replace } from "../dom.js";
import { changeChip, dataTable, statusBadge } from "../components.js";
import { groupedBarChart } from "../chart.js";
import { arrival, distance, duration, money } from "../format.js";
import { IN_TRANSIT } from "../status.js";
import { L, createMap, pinIcon, staticMarker } from "../map.js";
import { PolygonDrawer } from "../polygon-draw.js";
import { FleetMap } from "../fleet-map.js";
import { LiveSocket } from "../live.js";
import { connectionIndicator } from "../connection.js";
import { renderPipeline } from "../pipeline-strip.js";

const PUSH_SETTLE_MS = 1500; // a burst of changes refreshes once
const MIN_GAP_MS = 3000; // and never more often than this
const SLIDE_MS = 60000; // clock-driven figures (stuck, time in status)
const WINDOWS = { "1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days" };

const els = {
  kpis: document.getElementById("kpis"),
  updated: document.getElementById("ops-updated"),
  refresh: document.getElementById("ops-refresh"),
  windowPicker: document.getElementById("window-picker"),
  chart: document.getElementById("sales-chart"),
  board: document.getElementById("restaurant-board"),
  timeInStatus: document.getElementById("time-in-status"),
  stuck: document.getElementById("stuck-orders"),
  stuckAge: document.getElementById("stuck-age"),
  areaMap: document.getElementById("area-map"),
  areaResults: document.getElementById("area-results"),
  areaHint: document.getElementById("area-hint"),
  drawButton: document.getElementById("area-draw"),
  finishButton: document.getElementById("area-finish"),
  undoButton: document.getElementById("area-undo"),
  clearButton: document.getElementById("area-clear"),
  viewButton: document.getElementById("area-view"),
};

const data = { board: null, timeInStatus: null, stuck: null, restaurants: new Map() };
let selectedWindow = "24h";
let timer = null;
let settleTimer = null;
let lastRefresh = 0;
let socket = null;

// ------------------------------------------------------------------ KPIs

function sum(list, fn) {
  return list.reduce((n, x) => n + fn(x), 0);
}

function pct(current, previous) {
  return previous ? Math.round(((current - previous) / previous) * 1000) / 10 : null;
}

function kpi(id, title, value, extra = null) {
  return h("div", { class: "kpi", id }, h("p", { class: "kpi-title" }, title), h("p", { class: "kpi-value" }, value), extra ? h("p", { class: "kpi-extra" }, extra) : null);
}

function renderKpis() {
  if (!data.board || !data.timeInStatus || !data.stuck) return;
  const rows = data.timeInStatus;
  const active = sum(rows, (r) => r.orders);
  const transit = sum(rows.filter((r) => IN_TRANSIT.has(r.status)), (r) => r.orders);
  const w = (name) => data.board.map((b) => b.windows[name]);
  const hour = w("1h");
  const day = w("24h");
  const orders1h = sum(hour, (x) => x.orders);
  const prevOrders1h = sum(hour, (x) => x.previous_orders);
  const sales1h = sum(hour, (x) => Number(x.sales));
  const prevSales1h = sum(hour, (x) => Number(x.previous_sales));
  const orders24 = sum(day, (x) => x.orders);
  const sales24 = sum(day, (x) => Number(x.sales));
  replace(
    els.kpis,
    kpi("kpi-active", "Active orders", String(active), `${transit} on the road`),
    kpi("kpi-orders-1h", "Orders, last hour", String(orders1h), changeChip(pct(orders1h, prevOrders1h), "vs the hour before")),
    kpi("kpi-sales-1h", "Sales, last hour", money(sales1h), changeChip(pct(sales1h, prevSales1h), "vs the hour before")),
    kpi("kpi-aov", "Average order, 24 h", orders24 ? money(sales24 / orders24) : "–", `${orders24} orders`),
    kpi("kpi-stuck", "Stuck orders", String(data.stuck.length), `over ${els.stuckAge.selectedOptions[0].textContent} in one status`),
  );
  els.kpis.setAttribute("aria-busy", "false");
}

// ------------------------------------------------------------------ restaurant dashboard

function renderBoard() {
  const boards = data.board;
  if (!boards.length) {
    replace(els.chart);
    replace(els.board, emptyState("No sales in the last 14 days", "Restaurant figures appear as soon as orders come in."));
    return;
  }
  const name = WINDOWS[selectedWindow];
  const rows = [...boards].sort((a, b) => Number(b.windows[selectedWindow].sales) - Number(a.windows[selectedWindow].sales));
  replace(
    els.chart,
    groupedBarChart(
      rows.map((b) => ({ label: b.restaurant_name, current: Number(b.windows[selectedWindow].sales), previous: Number(b.windows[selectedWindow].previous_sales) })),
      { format: money, title: `Sales by restaurant, ${name}, against the period before`, currentLabel: `Sales, ${name}`, previousLabel: "The period before" },
    ),
  );
  replace(
    els.board,
    h(
      "table",
      { class: "table table-fit board-table" },
      h("caption", {}, `Restaurants, ${name}`),
      h(
        "thead",
        {},
        h("tr", {}, h("th", { scope: "col" }, "Restaurant"), h("th", { scope: "col", class: "num" }, "Orders"), h("th", { scope: "col", class: "num" }, "Sales"), h("th", { scope: "col", class: "hide-phone-cell" }, "Top dishes")),
      ),
      h(
        "tbody",
        {},
        rows.map((b) => {
          const x = b.windows[selectedWindow];
          return h(
            "tr",
            { dataset: { restaurantId: b.restaurant_id } },
            h("th", { scope: "row" }, b.restaurant_name),
            h("td", { class: "num" }, h("span", { class: "figure" }, String(x.orders)), changeChip(x.orders_change_pct)),
            h("td", { class: "num" }, h("span", { class: "figure" }, money(x.sales)), changeChip(x.sales_change_pct)),
            h(
              "td",
              { class: "hide-phone-cell" },
              x.top_dishes.length
                ? h("ol", { class: "top-dishes" }, x.top_dishes.map((d) => h("li", {}, h("span", {}, d.product_name), h("span", { class: "muted" }, ` ×${d.quantity}`))))
                : h("span", { class: "muted" }, "–"),
            ),
          );
        }),
      ),
    ),
  );
}

// ------------------------------------------------------------------ time in status, stuck

function renderTimeInStatus() {
  const rows = data.timeInStatus;
  if (!rows.length) {
    replace(els.timeInStatus, emptyState("No active orders", "Percentiles appear while orders are in progress."));
    return;
  }
  const max = Math.max(1, ...rows.map((r) => r.p90));
  const columns = [["Status"], ["Orders", "num"], ["p50", "num"], ["p90", "num"], ["p99", "num hide-phone-cell"], ["Max", "num"], [h("span", { class: "visually-hidden" }, "p50 to p90 bar"), "hide-narrow"]];
  replace(
    els.timeInStatus,
    dataTable("Seconds spent so far in the current status, active orders", columns, rows, (r) => {
      const bar = h("span", { class: "range-bar", "aria-hidden": "true" }, h("span", { class: "range-fill" }));
      bar.firstChild.style.left = `${(r.p50 / max) * 100}%`;
      bar.firstChild.style.width = `${Math.max(1, ((r.p90 - r.p50) / max) * 100)}%`;
      return [
        h("td", {}, statusBadge(r.status)),
        h("td", { class: "num" }, String(r.orders)),
        h("td", { class: "num" }, duration(r.p50)),
        h("td", { class: "num" }, duration(r.p90)),
        h("td", { class: "num hide-phone-cell" }, duration(r.p99)),
        h("td", { class: "num" }, duration(r.max)),
        h("td", { class: "hide-narrow" }, bar),
      ];
    }),
  );
}

function renderStuck() {
  const rows = data.stuck;
  if (!rows.length) {
    replace(els.stuck, emptyState("Nothing stuck", `No order has spent more than ${els.stuckAge.selectedOptions[0].textContent} in one status.`));
    return;
  }
  const columns = [["Order"], ["Restaurant"], ["Status"], ["In status", "num"], ["Total", "num hide-phone-cell"]];
  replace(
    els.stuck,
    dataTable("Orders waiting longest in their status", columns, rows, (r) => [
      h("td", {}, h("a", { href: orderUrl(r.order_id) }, `#${r.order_id}`)),
      h("td", {}, data.restaurants.get(r.restaurant_id) || `#${r.restaurant_id}`),
      h("td", {}, statusBadge(r.status)),
      h("td", { class: "num warn" }, duration(r.seconds_in_status)),
      h("td", { class: "num hide-phone-cell" }, money(r.total)),
    ]),
  );
}

// ------------------------------------------------------------------ refresh loop

async function panel(promise, target, render, key) {
  try {
    data[key] = await promise;
    render();
    return true;
  } catch (error) {
    if (!data[key]) replace(target, errorState(error, refresh));
    return false;
  }
}

async function refresh() {
  clearTimeout(timer);
  clearTimeout(settleTimer);
  lastRefresh = Date.now();
  els.refresh.disabled = true;
  const results = await Promise.all([
    panel(api("operations/restaurant-dashboard/").then((r) => r.results), els.board, renderBoard, "board"),
    panel(api("operations/time-in-status/").then((r) => r.results), els.timeInStatus, renderTimeInStatus, "timeInStatus"),
    panel(api(`operations/stuck-orders/?older_than=${els.stuckAge.value}&limit=200`).then((r) => r.results), els.stuck, renderStuck, "stuck"),
  ]);
  renderKpis();
  els.refresh.disabled = false;
  const ok = results.every(Boolean);
  els.updated.textContent = ok ? `Updated ${new Date().toLocaleTimeString()}` : `Some figures could not be refreshed (${new Date().toLocaleTimeString()}); retrying.`;
  els.updated.dataset.state = ok ? "ok" : "error";
  if (!document.hidden) timer = setTimeout(refresh, SLIDE_MS);
}

/** A pushed status change: refresh once the burst settles (and not too often). */
function refreshSoon() {
  if (settleTimer) return;
  const wait = Math.max(PUSH_SETTLE_MS, lastRefresh + MIN_GAP_MS - Date.now());
  settleTimer = setTimeout(() => {
    settleTimer = null;
    if (!document.hidden) refresh();
  }, wait);
}

// ------------------------------------------------------------------ area map

let map = null;
let drawer = null;
let resultLayer = null;

function updateAreaControls() {
  els.finishButton.disabled = !drawer.canFinish;
  els.undoButton.disabled = !drawer.active || !drawer.vertices.length;
  els.clearButton.disabled = !drawer.vertices.length;
  els.drawButton.setAttribute("aria-pressed", String(drawer.active));
  els.areaHint.textContent = drawer.active
    ? drawer.vertices.length < 3
      ? `Click on the map to add corners (${drawer.vertices.length} so far, at least 3).`
      : `${drawer.vertices.length} corners. Click the first corner, double-click, press Enter or “Finish area” to search.`
    : drawer.vertices.length
      ? "Area set. Draw again to change it."
      : "Draw an area on the map, or search the visible map area.";
}

async function searchArea(geojson) {
  resultLayer.clearLayers();
  replace(els.areaResults, loadingState("Finding deliveries in this area…"));
  try {
    const { results } = await api("operations/deliveries-in-area/", { method: "POST", body: geojson });
    results.forEach((r) =>
      staticMarker([r.lat, r.lon], pinIcon("courier", `#${r.order_id}`), `Order ${r.order_id}`)
        .addTo(resultLayer),
    );
    announce(`${results.length} deliver${results.length === 1 ? "y" : "ies"} in transit inside the area.`);
    if (!results.length) {
      replace(els.areaResults, emptyState("No deliveries in transit in this area"));
      return;
    }
    replace(
      els.areaResults,
      h("p", { class: "area-count" }, `${results.length} deliver${results.length === 1 ? "y" : "ies"} in transit in the area`),
      h(
        "ul",
        { class: "area-list" },
        results.map((r) =>
          h(
            "li",
            { dataset: { orderId: r.order_id } },
            h("a", { href: orderUrl(r.order_id) }, `Order #${r.order_id}`),
            " ",
            statusBadge(r.status),
            h("span", { class: "muted area-eta" }, ` ${distance(r.distance_left_km)} left · ${arrival(r.eta)}`),
          ),
        ),
      ),
    );
  } catch (error) {
    replace(els.areaResults, errorState(error));
  }
}

function setUpAreaMap() {
  map = createMap(els.areaMap, { label: "Operations map: draw an area to find deliveries in transit inside it" });
  resultLayer = L.layerGroup().addTo(map);
  drawer = new PolygonDrawer(map, { onChange: updateAreaControls, onComplete: searchArea });
  els.drawButton.addEventListener("click", () => {
    resultLayer.clearLayers();
    replace(els.areaResults);
    drawer.start();
    els.areaMap.focus();
  });
  els.finishButton.addEventListener("click", () => drawer.finish());
  els.undoButton.addEventListener("click", () => drawer.undo());
  els.clearButton.addEventListener("click", () => {
    drawer.cancel();
    resultLayer.clearLayers();
    replace(els.areaResults);
  });
  els.viewButton.addEventListener("click", () => {
    const b = map.getBounds();
    drawer.setVertices([b.getSouthWest(), b.getNorthWest(), b.getNorthEast(), b.getSouthEast()]);
  });
  updateAreaControls();
}

// ------------------------------------------------------------------ start

async function start() {
  els.kpis.setAttribute("aria-busy", "true");
  replace(els.kpis, loadingState("Loading live figures…"));
  for (const target of [els.board, els.timeInStatus, els.stuck]) replace(target, loadingState());
  els.windowPicker.addEventListener("change", (e) => {
    selectedWindow = e.target.value;
    if (data.board) renderBoard();
  });
  els.stuckAge.addEventListener("change", refresh);
  els.refresh.addEventListener("click", refresh);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh();
  });
  setUpAreaMap();
  const fleet = new FleetMap(document.getElementById("fleet-map"), {
    legend: document.getElementById("fleet-legend"),
    summary: document.getElementById("fleet-summary"),
  });
  try {
    const restaurants = await api("restaurants/");
    restaurants.forEach((r) => data.restaurants.set(r.id, r.name));
  } catch {
    /* Stuck orders then show restaurant ids. */
  }
  refresh();
  socket = new LiveSocket("operations/", {
    resume: false,
    onState: connectionIndicator(() => socket),
    onMessage: (message) => {
      if (message.type === "fleet") fleet.apply(message);
      else if (message.type === "update") refreshSoon();
      else if (message.type === "snapshot" && data.board) refreshSoon(); // back after a drop
      else if (message.type === "pipeline") renderPipeline(document.getElementById("pipeline-strip"), message);
    },
  }).start();
}

start();
