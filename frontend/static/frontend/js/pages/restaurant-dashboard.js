/**
 * The restaurant owner's dashboard: orders, sales and average order value for the
 * last hour / 24 hours / 7 days against the period before, a chart over time (the
 * same buckets of the period before as a line), top dishes (cancelled orders left
 * out) and how long orders have been in each kitchen status.
 *
 * Everything comes from Pinot through the API, scoped on the server to the
 * restaurants this user runs. Pushed: the restaurant's WebSocket announces every
 * status change, and the figures refresh a moment later (a burst refreshes once).
 */
import { api } from "../api.js";
import { config } from "../config.js";
import { connectionIndicator } from "../connection.js";
import { emptyState, errorState, h, loadingState, replace } from "../dom.js";
import { changeChip, dataTable, statusBadge } from "../components.js";
import { timeSeriesChart } from "../chart.js";
import { duration, money } from "../format.js";
import { LiveSocket } from "../live.js";

const restaurantId = config.restaurant.id;
const WINDOWS = { "1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days" };
const BEFORE = { "1h": "the hour before", "24h": "the day before", "7d": "the week before" };
const PUSH_SETTLE_MS = 1500; // refresh once per burst of changes
const SLIDE_MS = 60000; // the windows slide with the clock even when nothing changes

const els = {
  updated: document.getElementById("dash-updated"),
  windowPicker: document.getElementById("window-picker"),
  kpis: document.getElementById("kpis"),
  chart: document.getElementById("series-chart"),
  dishes: document.getElementById("top-dishes"),
  dishesWindow: document.getElementById("dishes-window"),
  timeInStatus: document.getElementById("time-in-status"),
};

const data = { board: undefined, series: undefined, timeInStatus: undefined };
let selectedWindow = "24h";
let settleTimer = null;
let socket = null;

const scoped = (path, extra = "") => `${path}?restaurant=${restaurantId}${extra}`;

function kpi(id, title, value, chip) {
  return h("div", { class: "kpi", id }, h("p", { class: "kpi-title" }, title), h("p", { class: "kpi-value" }, value), h("p", { class: "kpi-extra" }, chip));
}

function windowStats() {
  return data.board ? data.board.windows[selectedWindow] : null;
}

function renderKpis() {
  const w = windowStats();
  const before = `vs ${BEFORE[selectedWindow]}`;
  replace(
    els.kpis,
    kpi("kpi-orders", `Orders, ${WINDOWS[selectedWindow]}`, w ? String(w.orders) : "0", w ? changeChip(w.orders_change_pct, before) : h("span", { class: "muted" }, "no orders yet")),
    kpi("kpi-sales", `Sales, ${WINDOWS[selectedWindow]}`, money(w ? w.sales : 0), w ? changeChip(w.sales_change_pct, before) : null),
    kpi("kpi-aov", "Average order", w && w.average_order_value ? money(w.average_order_value) : "–", w ? changeChip(w.average_order_value_change_pct, before) : null),
  );
  els.kpis.setAttribute("aria-busy", "false");
}

function bucketLabel(ms) {
  const d = new Date(ms);
  if (selectedWindow === "7d") return d.toLocaleDateString(undefined, { weekday: "short" }) + (d.getHours() ? ` ${String(d.getHours()).padStart(2, "0")}h` : "");
  return d.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
}

function renderChart() {
  const rows = data.series || [];
  if (!rows.some((b) => b.orders || b.previous_orders)) {
    replace(els.chart, emptyState(`No sales in the ${WINDOWS[selectedWindow]}`, "The chart fills in as orders come in."));
    return;
  }
  replace(
    els.chart,
    timeSeriesChart(
      rows.map((b) => ({ label: bucketLabel(Date.parse(b.start)), current: Number(b.sales), previous: Number(b.previous_sales) })),
      { format: money, title: `Sales over the ${WINDOWS[selectedWindow]}, against ${BEFORE[selectedWindow]}`, currentLabel: `Sales, ${WINDOWS[selectedWindow]}`, previousLabel: BEFORE[selectedWindow].replace(/^the/, "The"), width: els.chart.clientWidth },
    ),
  );
}

function renderDishes() {
  const w = windowStats();
  els.dishesWindow.textContent = `${WINDOWS[selectedWindow]}, cancelled orders excluded`;
  if (!w || !w.top_dishes.length) {
    replace(els.dishes, emptyState("No dishes sold yet", `Nothing sold in the ${WINDOWS[selectedWindow]}.`));
    return;
  }
  const most = Math.max(...w.top_dishes.map((d) => d.quantity));
  replace(
    els.dishes,
    h(
      "ol",
      { class: "dish-ranking" },
      w.top_dishes.map((d) => {
        const bar = h("span", { class: "dish-bar", "aria-hidden": "true" }, h("span", { class: "dish-bar-fill" }));
        bar.firstChild.style.width = `${(d.quantity / most) * 100}%`;
        return h("li", {}, h("span", { class: "dish-name" }, d.product_name), h("span", { class: "dish-figure" }, `${d.quantity} sold · ${d.orders} order${d.orders === 1 ? "" : "s"}`), bar);
      }),
    ),
  );
}

function renderTimeInStatus() {
  const rows = data.timeInStatus || [];
  if (!rows.length) {
    replace(els.timeInStatus, emptyState("No orders in progress", "Times appear while orders are being made."));
    return;
  }
  const columns = [["Status"], ["Orders", "num"], ["Median", "num"], ["p90", "num"], ["Longest", "num"]];
  replace(
    els.timeInStatus,
    dataTable("Time spent so far in the current status, orders in progress", columns, rows, (r) => [
      h("td", {}, statusBadge(r.status)),
      h("td", { class: "num" }, String(r.orders)),
      h("td", { class: "num" }, duration(r.p50)),
      h("td", { class: "num" }, duration(r.p90)),
      h("td", { class: "num" }, duration(r.max)),
    ]),
  );
}

function renderAll() {
  renderKpis();
  renderChart();
  renderDishes();
  renderTimeInStatus();
}

async function load(key, promise, target) {
  try {
    data[key] = await promise;
    return true;
  } catch (error) {
    if (data[key] === undefined) replace(target, errorState(error, refresh));
    return false;
  }
}

async function refresh() {
  clearTimeout(settleTimer);
  const results = await Promise.all([
    load("board", api(scoped("operations/restaurant-dashboard/")).then((r) => r.results[0] || null), els.kpis),
    load("series", api(scoped("operations/sales-series/", `&window=${selectedWindow}`)).then((r) => r.results), els.chart),
    load("timeInStatus", api(scoped("operations/time-in-status/")).then((r) => r.results), els.timeInStatus),
  ]);
  if (data.board !== undefined) {
    renderKpis();
    renderDishes();
  }
  if (data.series !== undefined) renderChart();
  if (data.timeInStatus !== undefined) renderTimeInStatus();
  const ok = results.every(Boolean);
  els.updated.textContent = ok ? `Updated ${new Date().toLocaleTimeString()}` : "Some figures could not be loaded; retrying when orders change.";
  els.updated.dataset.state = ok ? "ok" : "error";
}

function refreshSoon() {
  clearTimeout(settleTimer);
  settleTimer = setTimeout(refresh, PUSH_SETTLE_MS);
}

function start() {
  els.kpis.setAttribute("aria-busy", "true");
  for (const target of [els.kpis, els.chart, els.dishes, els.timeInStatus]) replace(target, loadingState());
  els.windowPicker.addEventListener("change", async (e) => {
    selectedWindow = e.target.value;
    renderKpis();
    renderDishes();
    replace(els.chart, loadingState());
    await load("series", api(scoped("operations/sales-series/", `&window=${selectedWindow}`)).then((r) => r.results), els.chart);
    if (data.series !== undefined) renderChart();
  });
  let resizeTimer = null;
  let lastWidth = els.chart.clientWidth;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => {
      if (data.series !== undefined && els.chart.clientWidth !== lastWidth) {
        lastWidth = els.chart.clientWidth;
        renderChart(); // laid out for the new width
      }
    }, 200);
  });
  refresh();
  socket = new LiveSocket(`restaurants/${restaurantId}/`, {
    resume: false,
    onState: connectionIndicator(() => socket),
    onMessage: (message) => {
      if (message.type === "update" && message.kind === "status") refreshSoon();
      else if (message.type === "snapshot" && data.board !== undefined) refreshSoon(); // back after a drop
    },
  }).start();
  setInterval(() => {
    if (!document.hidden) refresh();
  }, SLIDE_MS);
}

start();
