/**
 * A shared tracking link's page (/t/<token>/), for whoever was sent the link: no sign-in.
 * It shows what the link's socket sends and nothing else (the server builds every message
 * from its allow-list): the status timeline, the courier on the map while the order is on
 * the road, the destination as an area of about 100 m (never the address), the distance
 * left, the arrival window and the time of the last GPS fix, which are also the map's text
 * equivalent beside it.
 *
 * Everything arrives over /ws/share/<token>/: a snapshot, then `update`, fast `status` and
 * `position` messages, applied with the same rules as the order page (delivery-state.js,
 * with status.js `furthest` and `newestPoint`). When the link is revoked or ends, the socket closes with 4404 and the
 * page says the link has ended. The token is read from the address, never from the page.
 */
import { arrivalFact, deliveryCard, progressCard, statRows, statusBadge, timelineItems } from "../components.js";
import { connectionIndicator } from "../connection.js";
import { DeliveryState } from "../delivery-state.js";
import { announce, h, loadingState, replace } from "../dom.js";
import { arrival, clock, distance } from "../format.js";
import { LiveSocket } from "../live.js";
import { GlidingMarker, L, createMap, glideToFix, pinIcon } from "../map.js";
import { IN_TRANSIT, isActive, label, newestPoint } from "../status.js";

const token = (location.pathname.match(/^\/t\/([^/]+)\/?$/) || [])[1] || "";
const root = document.getElementById("share-root");
const els = {};
/** Metres across the destination area: the server rounds it to 0.001 degree. */
const DESTINATION_AREA_M = 110;

/** What the page shows; its courier point only while the courier is on the road. */
const state = new DeliveryState({
  etaShifted: (note) => announce(`The delivery ${arrival(state.eta)}, ${note}.`),
  moveCourier,
  statusMoved,
  renderDelivery,
});
state.destination = null; // {lat, lon}, rounded

let socket = null;
let indicator = null; // the connection pill and banner (connection.js)
let map = null;
let layers = null;
let ticking = null;

// ------------------------------------------------------------------ state

function fromSnapshot(message) {
  const order = message.order;
  const shown = state.fromSnapshot(order, message.version);
  state.position = IN_TRANSIT.has(state.status) ? newestPoint(state.position, order.position) : null;
  state.destination = order.destination;
  return shown;
}

function statusMoved() {
  renderHeader();
  renderTimeline();
  if (!IN_TRANSIT.has(state.status)) removeCourier();
  announce(`The delivery is now: ${label(state.status)}.`);
}

// ------------------------------------------------------------------ layout

function build() {
  els.heading = h("div", { class: "order-header-main" });
  els.timeline = h("ol", { class: "timeline", "aria-label": "Delivery progress" });
  els.stats = h("dl", { class: "delivery-stats", id: "share-stats" });
  els.mapNote = h("p", { class: "map-note muted", id: "share-map-note" });
  els.map = h("div", { class: "map map-order", id: "share-map" });
  replace(
    root,
    h(
      "div",
      { class: "order-header" },
      els.heading,
      h("div", { class: "order-actions" }, h("span", { id: "live-pill", class: "live-pill", dataset: { state: "connecting" } }, "Connecting…")),
    ),
    h(
      "div",
      { class: "order-layout" },
      progressCard(els.timeline),
      deliveryCard([["home", "Destination area"], ["courier", "Courier"]], els.stats, els.map, els.mapNote),
    ),
  );
}

function renderHeader() {
  document.title = `${label(state.status)} · Delivery tracking · Ordertrack`;
  replace(
    els.heading,
    h("div", { class: "order-title" }, h("h1", {}, "Delivery tracking"), h("span", { id: "order-status", class: "order-status" }, statusBadge(state.status))),
    h("p", { class: "order-sub muted" }, "Someone shared this delivery with you. This page follows it live until shortly after it arrives."),
  );
}

function renderTimeline() {
  replace(els.timeline, timelineItems(state.status, state.statusTimes));
}

function renderDelivery() {
  const inTransit = IN_TRANSIT.has(state.status);
  const left = inTransit && state.distanceKm !== null && state.distanceKm !== undefined ? distance(state.distanceKm) : "–";
  const rows = [
    ["Distance left", left, "distance-left"],
    ["Arrives", arrivalFact(state.eta, state.arrivalTracker, state.status), "eta"],
    ["Last GPS fix", inTransit && state.position ? clock(state.position.at) : "–", "last-fix"],
  ];
  replace(els.stats, statRows(rows));
  let note;
  if (state.status === "CANCELLED") note = "This order was cancelled.";
  else if (state.status === "DELIVERED") note = "Delivered.";
  else if (inTransit && state.position) note = `The courier is ${left} from the destination area (last GPS fix at ${clock(state.position.at)}). The circle is an area of about 100 m around the destination, not the exact address.`;
  else if (inTransit) note = "The courier is on the way; their position shows with the first GPS fix.";
  else note = "The map follows the courier once the order is out for delivery. The circle is an area of about 100 m around the destination, not the exact address.";
  els.mapNote.textContent = note;
}

// ------------------------------------------------------------------ map

function drawMap() {
  if (!map) {
    map = createMap(els.map, { label: "Delivery map: the courier and the destination area" });
    els.map.setAttribute("aria-describedby", "share-stats share-map-note");
  }
  if (layers) layers.group.remove();
  const group = L.layerGroup().addTo(map);
  layers = { group, courier: null, area: null };
  const points = [];
  if (state.destination) {
    const centre = [state.destination.lat, state.destination.lon];
    layers.area = L.circle(centre, { radius: DESTINATION_AREA_M / 2, color: "#0f7b4f", weight: 2, fillOpacity: 0.15, interactive: false }).addTo(group);
    points.push(centre);
  }
  if (state.position) {
    placeCourier([state.position.lat, state.position.lon]);
    points.push([state.position.lat, state.position.lon]);
  }
  if (points.length > 1) map.fitBounds(L.latLngBounds(points).pad(0.35), { maxZoom: 16 });
  else if (points.length === 1) map.setView(points[0], 15);
}

function placeCourier(latlng) {
  layers.courier = new GlidingMarker(layers.group, latlng, pinIcon("courier"), "Courier");
  layers.courier.marker.getElement()?.setAttribute("data-testid", "courier-marker");
}

function removeCourier() {
  state.position = null;
  if (layers && layers.courier) {
    layers.courier.remove();
    layers.courier = null;
  }
}

/** A GPS fix newer than the shown one: glide there over about the time between fixes. */
function moveCourier(position) {
  if (!IN_TRANSIT.has(state.status)) return;
  const previous = state.position;
  if (newestPoint(previous, position) !== position) return;
  state.position = position;
  if (!layers) return;
  const target = [position.lat, position.lon];
  if (!layers.courier) {
    placeCourier(target);
    if (!map.getBounds().contains(target)) map.panTo(target);
    return;
  }
  glideToFix(map, layers.courier, previous, position);
}

// ------------------------------------------------------------------ live

function linkEnded() {
  if (socket) socket.stop();
  clearInterval(ticking);
  const banner = document.getElementById("connection");
  if (banner) banner.hidden = true; // the alert below says it
  document.title = "Tracking link ended · Ordertrack";
  replace(
    root,
    h(
      "div",
      { class: "state state-error", role: "alert", id: "share-ended" },
      h("h1", {}, "This tracking link has ended"),
      h("p", {}, "The delivery it followed has finished, or the person who shared it stopped sharing. Ask them for a new link if you still need one."),
    ),
  );
  map = null;
  layers = null;
}

function onMessage(message) {
  if (message.type === "snapshot") {
    const first = state.status === null;
    const previous = fromSnapshot(message);
    if (first) {
      build();
      indicator("live", {}); // the socket said so before the pill existed
    }
    renderHeader();
    renderTimeline();
    renderDelivery();
    drawMap();
    root.dataset.ready = "1";
    if (!first && previous !== state.status) announce(`The delivery is now: ${label(state.status)}.`);
    if (first) startTicking();
  } else if (state.status === null) {
    return; // nothing is drawn before the snapshot
  } else if (message.type === "update") {
    state.applyUpdate(message);
  } else if (message.type === "status") {
    state.applyStatus(message);
  } else if (message.type === "position") {
    moveCourier(message.position);
    renderDelivery();
  }
}

function startTicking() {
  ticking = setInterval(() => {
    if (!isActive(state.status)) return;
    renderTimeline(); // the current step's "so far" keeps counting
    renderDelivery(); // and the arrival counts down
  }, 1000);
}

function start() {
  if (!token) {
    linkEnded();
    return;
  }
  replace(root, loadingState("Connecting to the delivery…"));
  indicator = connectionIndicator(() => socket, { not_found: "This tracking link has ended." });
  socket = new LiveSocket(`share/${token}/`, {
    onMessage,
    resume: false, // every connect answers a fresh snapshot
    onState: (name, info) => {
      indicator(name, info);
      if (name === "failed" && info.reason === "not_found") linkEnded();
    },
  });
  socket.start();
}

start();
