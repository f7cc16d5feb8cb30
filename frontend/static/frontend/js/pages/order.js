/**
 * The order page: items and total, the seven-step timeline (time each step was
 * reached and how long it took; the current one highlighted and ticking), and
 * the live delivery map (restaurant, destination, the courier gliding between
 * GPS fixes, the path travelled, distance left and ETA).
 *
 * First paint from REST; then /ws/orders/<id>/ with ?since=<version>: the
 * server answers "resumed" (nothing missed) or a fresh snapshot, then updates,
 * and fast `status` and `position` messages ahead of them (delivery-state.js applies
 * them; status.js `furthest` and `newestPoint` decide what shows).
 */
import { api } from "../api.js";
import { config } from "../config.js";
import { connectionIndicator } from "../connection.js";
import { announce, errorState, h, loadingState, replace, toast } from "../dom.js";
import { arrivalFact, deliveryCard, progressCard, statRows, statusBadge, timelineItems } from "../components.js";
import { DeliveryState } from "../delivery-state.js";
import { arrival, clock, distance, money, when } from "../format.js";
import { GlidingMarker, L, createMap, glideToFix, pinIcon, staticMarker } from "../map.js";
import { IN_TRANSIT, isActive, label, newestPoint, timesFromTimeline } from "../status.js";
import { LiveSocket } from "../live.js";
import { notificationControl, notifyStatus, setTitleStatus } from "../notify.js";
import { shareControl } from "../share-link.js";

const orderId = config.orderId;
const root = document.getElementById("order-root");
const els = {};

/** What the page shows; replaced by snapshots, advanced by updates. */
const state = new DeliveryState({
  etaShifted: (note) => announce(`Your order ${arrival(state.eta)}, ${note}.`),
  moveCourier,
  statusMoved,
  renderDelivery,
});
state.order = null; // the REST detail (items, restaurant, delivery, customer, courier)

let socket = null;
let map = null;
let layers = null;

// ------------------------------------------------------------------ state

function fromDetail(detail, version) {
  state.order = detail;
  state.fromSnapshot(detail, version);
  state.position = newestPoint(state.position, detail.position);
}

function statusMoved() {
  renderHeader();
  renderTimeline();
  announce(`Order #${orderId} is now: ${label(state.status)}.`);
  notifyStatus(orderId, state.status);
  if (state.status === "DELIVERED") toast("Your order has been delivered. Enjoy your meal!", "success");
}

// ------------------------------------------------------------------ layout

function build() {
  els.headerMain = h("div", { class: "order-header-main" });
  els.cancelSlot = h("span", { class: "cancel-slot" });
  els.notifySlot = h("span", { class: "notify-slot" });
  els.shareSlot = h("span", { class: "share-slot" });
  els.sharePanel = h("section", { class: "card share-panel", id: "share-panel", "aria-labelledby": "share-title", hidden: true });
  els.header = h(
    "div",
    { class: "order-header" },
    els.headerMain,
    h("div", { class: "order-actions" }, h("span", { id: "live-pill", class: "live-pill", dataset: { state: "connecting" } }, "Connecting…"), els.notifySlot, els.shareSlot, els.cancelSlot),
  );
  els.timeline = h("ol", { class: "timeline", "aria-label": "Order progress" });
  els.items = h("div", { class: "items" });
  els.stats = h("dl", { class: "delivery-stats" });
  els.mapNote = h("p", { class: "map-note muted" });
  els.map = h("div", { class: "map map-order", id: "order-map" });
  replace(
    root,
    els.header,
    els.sharePanel,
    h(
      "div",
      { class: "order-layout" },
      h(
        "div",
        { class: "order-main" },
        progressCard(els.timeline),
        h("section", { class: "card", "aria-labelledby": "items-title" }, h("h2", { id: "items-title" }, "Your order"), els.items),
      ),
      deliveryCard([["restaurant", "Restaurant"], ["home", "You"], ["courier", "Courier"]], els.stats, els.map, els.mapNote),
    ),
  );
}

const CANCELLABLE = ["PLACED_ORDER", "ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED"];

function renderHeader() {
  const o = state.order;
  setTitleStatus(o.id, state.status);
  replace(
    els.headerMain,
    h("div", { class: "order-title" }, h("h1", {}, `Order #${o.id}`), h("span", { id: "order-status", class: "order-status" }, statusBadge(state.status))),
    h("p", { class: "order-sub muted" }, `${o.restaurant.name} · placed ${when(o.created_at)}`),
  );
  replace(
    els.cancelSlot,
    o.can_cancel !== false && CANCELLABLE.includes(state.status)
      ? h("button", { type: "button", class: "btn btn-danger-outline", onclick: cancelOrder }, "Cancel order")
      : null,
  );
}

function renderTimeline() {
  replace(els.timeline, timelineItems(state.status, state.statusTimes));
}

function renderItems() {
  const o = state.order;
  replace(
    els.items,
    h(
      "table",
      { class: "table items-table" },
      h("caption", { class: "visually-hidden" }, `Items of order #${o.id}`),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Item"), h("th", { scope: "col", class: "num" }, "Qty"), h("th", { scope: "col", class: "num" }, "Price"))),
      h(
        "tbody",
        {},
        o.items.map((item) =>
          h(
            "tr",
            {},
            h("td", {}, h("span", { class: "item-name" }, item.name), h("span", { class: "muted item-unit" }, ` ${money(item.unit_price)} each`)),
            h("td", { class: "num" }, String(item.quantity)),
            h("td", { class: "num" }, money(item.line_total)),
          ),
        ),
      ),
      h("tfoot", {}, h("tr", {}, h("th", { scope: "row", colspan: "2" }, "Total"), h("td", { class: "num total", id: "order-total" }, money(o.total)))),
    ),
    h("p", { class: "muted deliver-to" }, `Deliver to: ${o.delivery.address}`),
  );
}

function renderDelivery() {
  const inTransit = IN_TRANSIT.has(state.status);
  const courier = state.order.courier ? state.order.courier.name : null;
  const rows = [
    ["Distance left", inTransit && state.distanceKm !== null && state.distanceKm !== undefined ? distance(state.distanceKm) : "–", "distance-left"],
    ["Arrives", arrivalFact(state.eta, state.arrivalTracker, state.status), "eta"],
    ["Courier", courier || (inTransit ? "On the way" : "Not assigned yet"), "courier"],
    ["Last GPS fix", state.position ? clock(state.position.at) : "–", "last-fix"],
  ];
  replace(els.stats, statRows(rows));
  let note = "";
  if (state.status === "CANCELLED") note = "This order was cancelled.";
  else if (state.status === "DELIVERED") note = "Delivered. The line shows the route the courier took.";
  else if (!state.position) note = "The map follows your courier once the order is out for delivery.";
  els.mapNote.textContent = note;
}

// ------------------------------------------------------------------ map

function drawMap() {
  const o = state.order;
  if (!map) {
    map = createMap(els.map, { label: `Delivery map: ${o.restaurant.name} to ${o.delivery.address}` });
  }
  if (layers) layers.group.remove();
  const group = L.layerGroup().addTo(map);
  const restaurant = [o.restaurant.lat, o.restaurant.lon];
  const home = [o.delivery.lat, o.delivery.lon];
  staticMarker(restaurant, pinIcon("restaurant"), o.restaurant.name).addTo(group);
  staticMarker(home, pinIcon("home"), "Delivery address").addTo(group);
  const path = (o.path || []).map((p) => [p.lat, p.lon]);
  if (state.position && !path.length) path.push([state.position.lat, state.position.lon]);
  const trail = L.polyline(path, { color: "#2563eb", weight: 5, opacity: 0.85, lineCap: "round", interactive: false }).addTo(group);
  const remaining = L.polyline([], { color: "#2563eb", weight: 2, dashArray: "4 8", opacity: 0.6, interactive: false }).addTo(group);
  layers = { group, trail, remaining, home, points: path, courier: null };
  if (state.position) placeCourier([state.position.lat, state.position.lon]);
  const bounds = L.latLngBounds([restaurant, home, ...path]);
  map.fitBounds(bounds.pad(0.25), { maxZoom: 15 });
}

function placeCourier(latlng) {
  layers.courier = new GlidingMarker(layers.group, latlng, pinIcon("courier"), "Courier");
  layers.courier.marker.getElement()?.setAttribute("data-testid", "courier-marker");
  layers.courier.onFrame = (here, done) => {
    const points = done ? layers.points : [...layers.points.slice(0, -1), [here.lat, here.lng]];
    layers.trail.setLatLngs(points);
    layers.remaining.setLatLngs(IN_TRANSIT.has(state.status) ? [here, layers.home] : []);
  };
  layers.remaining.setLatLngs(IN_TRANSIT.has(state.status) ? [latlng, layers.home] : []);
}

/** A fast `position` message: the courier's point, ahead of the update with distance and ETA. */
function applyPosition(message) {
  moveCourier(message.position);
  renderDelivery();
}

/** A GPS fix newer than the shown one: extend the path and glide there over about the time between fixes. */
function moveCourier(position) {
  const previous = state.position;
  if (newestPoint(previous, position) !== position) return; // older than what shows
  state.position = position;
  if (!layers) return;
  const target = [position.lat, position.lon];
  layers.points.push(target);
  if (!layers.courier) {
    placeCourier(target);
    layers.trail.setLatLngs(layers.points);
    if (!map.getBounds().contains(target)) map.panTo(target);
    return;
  }
  glideToFix(map, layers.courier, previous, position);
}

// ------------------------------------------------------------------ actions

async function cancelOrder(event) {
  if (!window.confirm(`Cancel order #${orderId}?`)) return;
  const button = event.currentTarget;
  button.disabled = true;
  try {
    const detail = await api(`orders/${orderId}/cancel/`, { method: "POST" });
    state.order = { ...state.order, ...detail, can_cancel: false };
    state.status = detail.status;
    state.statusTimes = { ...state.statusTimes, ...timesFromTimeline(detail.timeline) };
    state.setEta(detail.eta);
    renderHeader();
    renderTimeline();
    renderDelivery();
    announce(`Order #${orderId} was cancelled.`);
  } catch (error) {
    button.disabled = false;
    toast(error.message, "error");
  }
}

// ------------------------------------------------------------------ live

function renderAll() {
  renderHeader();
  renderTimeline();
  renderItems();
  renderDelivery();
  drawMap();
}

function onMessage(message) {
  if (message.type === "snapshot") {
    const previous = state.status;
    fromDetail(message.order, message.version);
    renderAll();
    if (previous && previous !== state.status) {
      announce(`Order #${orderId} is now: ${label(state.status)}.`);
      notifyStatus(orderId, state.status);
    }
  } else if (message.type === "update" && message.order_id === orderId) {
    state.applyUpdate(message);
  } else if (message.type === "status" && message.order_id === orderId) {
    state.applyStatus(message);
  } else if (message.type === "position" && message.order_id === orderId) {
    applyPosition(message);
  }
}

async function start() {
  replace(root, loadingState("Loading your order…"));
  let detail;
  try {
    detail = await api(`orders/${orderId}/`);
  } catch (error) {
    if (error.status === 404) {
      replace(root, h("div", { class: "state state-error", role: "alert" }, h("h1", {}, "Order not found"), h("p", {}, "There is no such order, or it is not yours."), h("a", { class: "btn btn-secondary", href: config.urls.myOrders }, "Back to my orders")));
    } else {
      replace(root, errorState(error, start));
    }
    return;
  }
  build();
  fromDetail(detail, detail.tracking.version);
  renderAll();
  if (detail.is_active && config.user.roles.includes("customer")) notificationControl(els.notifySlot);
  if (config.user.roles.includes("customer")) shareControl(els.shareSlot, els.sharePanel, orderId, { canMake: detail.is_active });
  root.dataset.ready = "1";
  socket = new LiveSocket(`orders/${orderId}/`, { onMessage, onState: connectionIndicator(() => socket) });
  socket.setVersion(detail.tracking.version);
  socket.start();
  setInterval(() => {
    if (!isActive(state.status)) return;
    renderTimeline(); // the current step's "so far" keeps counting
    renderDelivery(); // and the ETA counts down
  }, 1000);
}

start();
