/**
 * The courier's page (/courier/), made for a phone: the deliveries they carry now, each
 * with the restaurant, the drop-off and a map of their own position and the destination
 * (whose text equivalent beside it gives the distance left, the arrival window and the
 * last fix); one tap for each step they may make (at the door, delivered) through the REST
 * command, refused with the API's own message; and their position, reported from the
 * phone's GPS while a delivery is on the road (gps.js: batched within the server's points
 * budget, queued while offline), with the screen kept on meanwhile.
 *
 * /ws/courier/ sends the deliveries (a snapshot), then every change to them; a delivery
 * assigned or taken away arrives as a new snapshot. Statuses and points follow status.js
 * (`furthest`, `newestPoint`). The browser gives a position only to a secure page (HTTPS,
 * or localhost): anywhere else the page says so, and the steps still work.
 */
import { api } from "../api.js";
import { config, orderUrl } from "../config.js";
import { connectionIndicator } from "../connection.js";
import { announce, emptyState, h, replace } from "../dom.js";
import { statRows, statusBadge } from "../components.js";
import { arrival, clockSeconds, distance } from "../format.js";
import { Reporter } from "../gps.js";
import { LiveSocket } from "../live.js";
import { GlidingMarker, L, createMap, pinIcon, staticMarker } from "../map.js";
import { IN_TRANSIT, furthest, isActive, label, newestPoint } from "../status.js";

/** No new fix for this long while reporting: the page says the signal may be lost. */
const SIGNAL_LOST_MS = 30000;
/** The step a courier makes from each status, what its button says and what it did. */
const STEPS = {
  OUT_FOR_DELIVERY: { to: "ARRIVING_AT_DOOR", button: "I'm at the door", done: "marked as arriving at the door" },
  ARRIVING_AT_DOOR: { to: "DELIVERED", button: "Delivered", done: "delivered" },
};
/** The courier's words where the customer's (status.js) would read oddly. */
const COURIER_LABELS = { ARRIVING_AT_DOOR: "At the door" };

const listEl = document.getElementById("deliveries");
const titleEl = document.getElementById("deliveries-title");
const summaryEl = document.getElementById("courier-summary");
const countEl = document.getElementById("carried-count");
const gpsStateEl = document.getElementById("gps-state");
const gpsStatsEl = document.getElementById("gps-stats");
const gpsScreenEl = document.getElementById("gps-screen");
const gpsActionsEl = document.getElementById("gps-actions");
const gpsButtonSlot = h("div", { class: "gps-button" });
const gpsProblemSlot = h("div", { class: "gps-problem" });
gpsActionsEl.append(gpsButtonSlot, gpsProblemSlot);

/** order id -> the delivery as shown: {id, order (REST detail), version, status, position (the server's), distanceKm, eta, pending, error, els, map, layers} */
const deliveries = new Map();
let socket = null;
let ready = false;

const reporter = new Reporter(config.gps, {
  storageKey: `ordertrack.gps.${config.user.username}`,
  onChange: () => renderGps(),
});

/** Where the phone's location stands (`state`: idle, insecure, unsupported, ask, waiting, tracking, lost, denied). */
const geo = { state: "idle", permission: null, asked: false, watchId: null, startedAt: 0, fix: null, lostSince: null, serverAt: null };
/** The screen wake lock: wanted while reporting, re-taken when the page is shown again. */
const screen = { wanted: false, sentinel: null, requesting: false, failure: null };

function courierLabel(status) {
  return COURIER_LABELS[status] || label(status);
}

// ------------------------------------------------------------------ state

function newDelivery(detail) {
  const d = { id: detail.id, version: -1, status: null, position: null, distanceKm: null, eta: null, pending: null, error: null, els: null, map: null, layers: null };
  fromDetail(d, detail);
  return d;
}

function fromDetail(d, detail) {
  d.order = detail;
  d.status = furthest(d.status, detail.status);
  d.position = newestPoint(d.position, detail.position);
  if (detail.tracking.version >= d.version) {
    d.version = detail.tracking.version;
    d.distanceKm = detail.distance_left_km;
    d.eta = detail.eta;
  }
}

function applySnapshot(orders) {
  const seen = new Set();
  for (const detail of orders) {
    seen.add(detail.id);
    const known = deliveries.get(detail.id);
    if (known) {
      const before = known.status;
      fromDetail(known, detail);
      if (before !== known.status) statusMoved(known);
      continue;
    }
    deliveries.set(detail.id, newDelivery(detail));
    if (ready) announce(`New delivery: order #${detail.id}, from ${detail.restaurant.name} to ${detail.delivery.address}.`);
  }
  for (const d of [...deliveries.values()]) {
    if (seen.has(d.id)) continue;
    removeDelivery(d);
    if (ready && isActive(d.status)) announce(`Order #${d.id} is no longer yours to deliver.`);
  }
  ready = true;
  renderList();
  syncReporting();
}

function applyUpdate(d, message) {
  if (message.version <= d.version) return;
  const before = d.status;
  d.version = message.version;
  d.status = furthest(before, message.status);
  d.distanceKm = message.distance_left_km;
  d.eta = message.eta;
  if (message.position) d.position = newestPoint(d.position, message.position);
  if (before !== d.status) statusMoved(d);
  renderCard(d);
}

function applyStatus(d, message) {
  if (furthest(d.status, message.status) === d.status) return;
  d.status = message.status;
  statusMoved(d);
  renderCard(d);
}

/** The delivery's status moved on (a tap here, or someone else's change). */
function statusMoved(d) {
  if (d.announced !== d.status) announce(`Order #${d.id} is now: ${courierLabel(d.status)}.`);
  d.announced = d.status;
  syncReporting();
  renderSummary();
}

// ------------------------------------------------------------------ the list

function sorted() {
  return [...deliveries.values()].sort((a, b) => Number(IN_TRANSIT.has(b.status)) - Number(IN_TRANSIT.has(a.status)) || a.id - b.id);
}

function renderList() {
  const items = sorted().map((d) => {
    if (!d.els) buildCard(d);
    return d.els.item;
  });
  const current = [...listEl.children];
  if (!items.length) {
    if (listEl.contains(document.activeElement)) titleEl.focus();
    replace(listEl, h("li", { class: "delivery-empty" }, emptyState("No deliveries right now", "A delivery shows here by itself as soon as a restaurant hands one to you.")));
  } else if (current.length !== items.length || current.some((el, i) => el !== items[i])) {
    const focused = document.activeElement;
    replace(listEl, items); // only when the order changed: moving a card drops its focus
    if (focused && focused.isConnected && focused !== document.activeElement) focused.focus();
  }
  listEl.setAttribute("aria-busy", "false");
  for (const d of deliveries.values()) renderCard(d);
  renderSummary();
}

function removeDelivery(d) {
  deliveries.delete(d.id);
  reporter.untrack(d.id);
  if (d.els && d.els.item.contains(document.activeElement)) titleEl.focus();
  if (d.map) d.map.remove();
  if (d.els) d.els.item.remove();
}

function renderSummary() {
  const onRoad = [...deliveries.values()].filter((d) => IN_TRANSIT.has(d.status)).length;
  const total = [...deliveries.values()].filter((d) => isActive(d.status)).length;
  countEl.textContent = total ? String(total) : "";
  summaryEl.textContent = !ready
    ? "Loading your deliveries…"
    : total === 0
      ? "Nothing to deliver right now: this page updates by itself."
      : `${total} ${total === 1 ? "delivery" : "deliveries"}, ${onRoad} on the road.`;
}

function buildCard(d) {
  const o = d.order;
  const ids = { title: `delivery-${d.id}-title`, stats: `delivery-${d.id}-stats`, note: `delivery-${d.id}-note` };
  const els = {
    title: h("h3", { class: "delivery-title", id: ids.title, tabindex: "-1" }, `Order #${d.id}`),
    badge: h("span", { class: "order-status" }),
    actions: h("div", { class: "delivery-actions" }),
    error: h("div", { class: "delivery-error" }),
    stats: h("dl", { class: "delivery-stats", id: ids.stats }),
    map: h("div", { class: "map map-courier", id: `delivery-${d.id}-map` }),
    note: h("p", { class: "map-note muted", id: ids.note }),
  };
  const items = (o.items || []).map((i) => `${i.quantity}× ${i.name}`).join(", ");
  els.item = h(
    "li",
    { class: "card delivery-card", dataset: { orderId: d.id } },
    h("div", { class: "delivery-head" }, els.title, els.badge, h("a", { class: "delivery-link", href: orderUrl(d.id) }, "Details", h("span", { class: "visually-hidden" }, ` of order #${d.id}`))),
    h(
      "dl",
      { class: "delivery-facts" },
      h("div", {}, h("dt", {}, "Pick up at"), h("dd", { class: "delivery-restaurant" }, o.restaurant.name)),
      h("div", {}, h("dt", {}, "Drop off at"), h("dd", { class: "delivery-address" }, o.delivery.address)),
      o.customer ? h("div", {}, h("dt", {}, "For"), h("dd", {}, o.customer.name)) : null,
      items ? h("div", {}, h("dt", {}, "Items"), h("dd", {}, items)) : null,
    ),
    els.actions,
    els.error,
    els.stats,
    els.map,
    els.note,
  );
  d.els = els;
}

function renderCard(d) {
  if (!d.els) return;
  const els = d.els;
  replace(els.badge, statusBadge(d.status, courierLabel(d.status)));
  renderActions(d);
  renderFacts(d);
  if (!d.map && els.map.isConnected) drawMap(d);
  else if (d.map) moveMe(d); // off the road: the marker goes
}

/** The step button; rebuilt only when what it offers changes, keeping the keyboard's place. */
function renderActions(d) {
  const step = STEPS[d.status];
  const key = `${d.status}|${d.pending || ""}|${d.error || ""}`;
  if (d.actionsKey === key) return;
  d.actionsKey = key;
  const els = d.els;
  const hadFocus = els.actions.contains(document.activeElement);
  const shown = els.actions.querySelector("button");
  let button = null;
  if (step && shown && shown.dataset.step === step.to) {
    // The same step, saving or refused: the button stays, and keeps the keyboard's focus
    // (aria-disabled, not disabled, which would drop it); a second press does nothing.
    button = shown;
    button.setAttribute("aria-disabled", d.pending ? "true" : "false");
    button.firstChild.textContent = d.pending ? "Saving…" : step.button;
  } else if (step) {
    button = h(
      "button",
      { type: "button", class: "btn btn-primary btn-large btn-block", "aria-disabled": "false", dataset: { step: step.to }, onclick: () => makeStep(d, step) },
      step.button,
      h("span", { class: "visually-hidden" }, `, order #${d.id}`),
    );
    replace(els.actions, button);
  } else if (d.status === "DELIVERED") {
    replace(els.actions, h("p", { class: "delivery-done" }, "Delivered. Thank you!"));
  } else if (d.status === "CANCELLED") {
    replace(els.actions, h("p", { class: "delivery-done" }, "Cancelled: nothing to deliver."));
  } else {
    replace(els.actions, h("p", { class: "muted" }, `At the restaurant: ${label(d.status).toLowerCase()}. Your steps start once it is out for delivery.`));
  }
  replace(els.error, d.error ? h("p", { class: "alert alert-error", role: "alert" }, d.error) : null);
  if (hadFocus && !els.actions.contains(document.activeElement)) (button || els.title).focus();
}

/** The map's text equivalent: distance left, arrival window, last fix; and a sentence. */
function renderFacts(d) {
  const o = d.order;
  const onRoad = IN_TRANSIT.has(d.status);
  const fix = geo.fix;
  const home = L.latLng(o.delivery.lat, o.delivery.lon);
  const straight = onRoad && fix ? L.latLng(fix.lat, fix.lon).distanceTo(home) / 1000 : null;
  const left = straight !== null ? `${distance(straight)} in a straight line` : onRoad && d.distanceKm !== null && d.distanceKm !== undefined ? distance(d.distanceKm) : "–";
  const lastFix = onRoad ? (fix ? clockSeconds(fix.at) : d.position ? clockSeconds(d.position.at) : "–") : "–";
  replace(
    d.els.stats,
    statRows([
      ["Distance left", left, `delivery-${d.id}-left`],
      ["Arrival window", d.eta ? arrival(d.eta) : d.status === "DELIVERED" ? "Delivered" : "–", `delivery-${d.id}-eta`],
      ["Last fix", lastFix, `delivery-${d.id}-fix`],
    ]),
  );
  let note;
  if (d.status === "DELIVERED") note = "Delivered.";
  else if (d.status === "CANCELLED") note = "This order was cancelled.";
  else if (!onRoad) note = `Pick the order up at ${o.restaurant.name}. The map shows the restaurant and the drop-off; it follows you once the order is out for delivery.`;
  else if (fix) note = `You are ${left} from the drop-off at ${o.delivery.address} (GPS fix at ${clockSeconds(fix.at)}).`;
  else note = "Your position shows on the map with the first GPS fix from this phone.";
  d.els.note.textContent = note;
}

// ------------------------------------------------------------------ maps

function drawMap(d) {
  const o = d.order;
  const els = d.els;
  d.map = createMap(els.map, { label: `Map of order #${d.id}: you, ${o.restaurant.name} and the drop-off` });
  els.map.setAttribute("aria-describedby", `${els.stats.id} ${els.note.id}`);
  const group = L.layerGroup().addTo(d.map);
  const restaurant = [o.restaurant.lat, o.restaurant.lon];
  const home = [o.delivery.lat, o.delivery.lon];
  staticMarker(restaurant, pinIcon("restaurant"), o.restaurant.name).addTo(group);
  staticMarker(home, pinIcon("home"), "Drop-off").addTo(group);
  const line = L.polyline([], { color: "#2563eb", weight: 3, dashArray: "4 8", opacity: 0.7, interactive: false }).addTo(group);
  d.layers = { group, home, line, me: null };
  const here = myPoint(d);
  if (here) placeMe(d, here);
  d.map.fitBounds(L.latLngBounds([restaurant, home, ...(here ? [here] : [])]).pad(0.2), { maxZoom: 16 });
}

/** Where the map shows the courier: this phone's last fix, else the server's last point. */
function myPoint(d) {
  if (!IN_TRANSIT.has(d.status)) return null;
  if (geo.fix) return [geo.fix.lat, geo.fix.lon];
  return d.position ? [d.position.lat, d.position.lon] : null;
}

function placeMe(d, latlng) {
  d.layers.me = new GlidingMarker(d.layers.group, latlng, pinIcon("courier"), "You");
  d.layers.me.marker.getElement()?.setAttribute("data-testid", "courier-marker");
  d.layers.me.onFrame = (here) => d.layers.line.setLatLngs(IN_TRANSIT.has(d.status) ? [here, d.layers.home] : []);
  d.layers.line.setLatLngs([latlng, d.layers.home]);
}

function moveMe(d) {
  if (!d.map) return;
  const target = myPoint(d);
  if (!target) {
    if (d.layers.me) d.layers.me.remove();
    d.layers.me = null;
    d.layers.line.setLatLngs([]);
    return;
  }
  if (!d.layers.me) placeMe(d, target);
  else d.layers.me.moveTo(target, 800);
  if (!d.map.getBounds().pad(-0.1).contains(target)) d.map.panTo(target, { animate: true });
}

// ------------------------------------------------------------------ steps

async function makeStep(d, step) {
  if (d.pending) return;
  d.pending = step.to;
  d.error = null;
  renderCard(d);
  try {
    // The last points go first: once delivered, the server takes no more for the order.
    if (step.to === "DELIVERED") await reporter.flush(d.id);
    const detail = await api(`orders/${d.id}/advance/`, { method: "POST", body: { status: step.to } });
    d.pending = null;
    d.status = furthest(d.status, detail.status);
    d.announced = d.status;
    announce(`Order #${d.id} ${step.done}.`);
    syncReporting();
    renderSummary();
  } catch (error) {
    d.pending = null;
    d.error = `Order #${d.id} could not be ${step.done}: ${error.message}`;
  }
  renderCard(d);
}

// ------------------------------------------------------------------ location

/** Report positions for the deliveries on the road, and only while there are any. */
function syncReporting() {
  for (const d of deliveries.values()) {
    if (IN_TRANSIT.has(d.status)) reporter.track(d.id, d.order.created_at);
    else reporter.untrack(d.id);
  }
  updateLocation();
}

function updateLocation() {
  const wanted = reporter.tracking();
  if (!wanted) {
    stopWatching();
    setGeo("idle");
    releaseScreen();
    return;
  }
  if (!window.isSecureContext) setGeo("insecure");
  else if (!("geolocation" in navigator)) setGeo("unsupported");
  else if (geo.permission === "denied") {
    stopWatching();
    setGeo("denied");
  } else if (geo.watchId === null) {
    if (geo.permission === "granted" || geo.asked) startWatching();
    else setGeo("ask");
  }
  if (geo.watchId !== null) holdScreen();
  else releaseScreen();
}

function startWatching() {
  geo.asked = true;
  if (geo.watchId !== null) navigator.geolocation.clearWatch(geo.watchId);
  geo.startedAt = Date.now();
  setGeo(geo.fix ? "tracking" : "waiting");
  geo.watchId = navigator.geolocation.watchPosition(onFix, onGeoError, { enableHighAccuracy: true, maximumAge: 0 });
  holdScreen();
}

function stopWatching() {
  if (geo.watchId !== null) navigator.geolocation.clearWatch(geo.watchId);
  geo.watchId = null;
  releaseScreen();
}

function onFix(position) {
  const fix = {
    lat: position.coords.latitude,
    lon: position.coords.longitude,
    accuracy: position.coords.accuracy,
    at: position.timestamp || Date.now(),
    receivedAt: Date.now(),
  };
  const was = geo.state;
  geo.fix = fix;
  geo.lostSince = null;
  geo.permission = "granted"; // a fix says so, whatever the page was told before
  reporter.add(fix);
  setGeo("tracking");
  if (was === "lost") announce("GPS signal back: your position is reported again.");
  else if (was === "waiting") announce("Sharing your location while you deliver.");
  for (const d of deliveries.values()) {
    moveMe(d);
    if (d.els) renderFacts(d);
  }
}

function onGeoError(error) {
  if (error.code === error.PERMISSION_DENIED) {
    geo.permission = "denied";
    stopWatching();
    setGeo("denied");
    announce("Location is blocked for this page: your position is not reported.");
    return;
  }
  signalLost(); // unavailable or timed out: the watch goes on, and the next fix clears it
}

function signalLost() {
  if (geo.state === "lost" || geo.watchId === null) return;
  geo.lostSince = Math.max(geo.startedAt, geo.fix ? geo.fix.receivedAt : 0);
  setGeo("lost");
  announce("GPS signal lost: your position is not being reported.");
}

function setGeo(state) {
  geo.state = state;
  renderGps();
}

/** The browser's answer so far (granted, denied, prompt), followed as the courier changes it. */
async function followPermission() {
  if (!navigator.permissions || !navigator.permissions.query) return;
  try {
    const status = await navigator.permissions.query({ name: "geolocation" });
    geo.permission = status.state;
    status.addEventListener("change", () => {
      geo.permission = status.state; // allowed in the site settings: reporting starts by itself
      updateLocation();
    });
  } catch {
    /* No permissions API for geolocation here: the button asks. */
  }
}

// ------------------------------------------------------------------ screen

async function holdScreen() {
  screen.wanted = true;
  if (!("wakeLock" in navigator) || screen.sentinel || screen.requesting || document.visibilityState !== "visible") {
    renderGps();
    return;
  }
  screen.requesting = true;
  try {
    const sentinel = await navigator.wakeLock.request("screen");
    if (!screen.wanted) {
      await sentinel.release();
    } else {
      screen.sentinel = sentinel;
      screen.failure = null;
      sentinel.addEventListener("release", () => {
        if (screen.sentinel === sentinel) screen.sentinel = null;
        renderGps();
      });
    }
  } catch (error) {
    screen.failure = (error && error.message) || "refused";
  } finally {
    screen.requesting = false;
  }
  renderGps();
}

function releaseScreen() {
  screen.wanted = false;
  const sentinel = screen.sentinel;
  screen.sentinel = null;
  if (sentinel) sentinel.release().catch(() => {});
}

// ------------------------------------------------------------------ the location panel

const GPS_TEXT = {
  idle: () => "No delivery is on the road: your location is not shared.",
  insecure: () =>
    `Your location cannot be shared from this address: browsers give it only to secure pages, and ${location.origin} is not one. Open the page over HTTPS (or on this device at localhost). Your steps below still work.`,
  unsupported: () => "This browser cannot share its location. Your steps below still work; the customer sees no courier on the map.",
  ask: () => "While you deliver, the customer follows you on the map. Share your location to start.",
  waiting: () => "Waiting for the first GPS fix…",
  tracking: () => "Sharing your location while you deliver.",
  lost: () => `No GPS fix since ${clockSeconds(geo.lostSince)}: the signal may be lost (indoors, under a bridge). Reporting goes on with the next fix.`,
  denied: () => "Location is blocked for this page, so the customer cannot follow you. Allow it in the browser's site settings (the icon by the address); reporting then starts by itself.",
};

function renderGps() {
  gpsStateEl.dataset.state = geo.state;
  gpsStateEl.textContent = GPS_TEXT[geo.state]();
  const active = reporter.tracking();
  const queued = reporter.queued();
  const sentAt = Math.max(0, ...[...reporter.orders.values()].map((o) => o.sentAt || 0));
  const errors = [...reporter.orders.values()].map((o) => o.error).filter(Boolean);
  const fix = geo.fix;
  replace(
    gpsStatsEl,
    active
      ? statRows([
          ["Last fix", fix ? `${clockSeconds(fix.at)}${Number.isFinite(fix.accuracy) ? ` (±${Math.round(fix.accuracy)} m)` : ""}` : "–", "gps-last-fix"],
          ["Waiting to send", queued ? `${queued} ${queued === 1 ? "position" : "positions"}${reporter.offline ? " (offline)" : ""}` : reporter.offline ? "None (offline)" : "None", "gps-queued"],
          ["Last sent", sentAt ? clockSeconds(sentAt) : "–", "gps-sent"],
          ["Server has you at", geo.serverAt ? clockSeconds(geo.serverAt) : "–", "gps-server"],
        ])
      : null,
  );
  let screenText = null;
  if (active && geo.watchId !== null) {
    if (screen.sentinel) screenText = "The screen stays on while you deliver. Locking the phone or leaving this page stops your position being reported.";
    else if (!("wakeLock" in navigator)) screenText = "This browser cannot keep the screen on: keep the phone unlocked with this page open. A locked phone stops reporting your position.";
    else screenText = `The screen could not be kept on${screen.failure ? ` (${screen.failure})` : ""}: keep the phone unlocked with this page open. A locked phone stops reporting your position.`;
  }
  gpsScreenEl.hidden = !screenText;
  gpsScreenEl.textContent = screenText || "";
  // The button: only rebuilt when what it offers changes (a keyboard user keeps their place).
  const offer = geo.state === "ask" ? "Share my location" : geo.state === "denied" ? "Try again" : "";
  if (gpsButtonSlot.dataset.offer !== offer) {
    const hadFocus = gpsButtonSlot.contains(document.activeElement);
    gpsButtonSlot.dataset.offer = offer;
    replace(gpsButtonSlot, offer ? h("button", { type: "button", class: `btn ${offer === "Try again" ? "btn-secondary" : "btn-primary btn-large"} btn-block`, onclick: startWatching }, offer) : null);
    if (hadFocus) (gpsButtonSlot.firstElementChild || gpsStateEl).focus();
  }
  const problem = errors.length ? `Some positions were not taken: ${errors[0]}` : "";
  if (gpsProblemSlot.textContent !== problem) replace(gpsProblemSlot, problem ? h("p", { class: "alert alert-warn", role: "alert" }, problem) : null);
}

// ------------------------------------------------------------------ live

function onMessage(message) {
  if (message.type === "snapshot") {
    applySnapshot(message.orders);
    return;
  }
  const d = deliveries.get(message.order_id);
  if (!d) return; // a delivery the page does not show yet comes with the next snapshot
  if (message.type === "update") applyUpdate(d, message);
  else if (message.type === "status") applyStatus(d, message);
  else if (message.type === "position") {
    d.position = newestPoint(d.position, message.position);
    geo.serverAt = Math.max(geo.serverAt || 0, Date.parse(message.position.at));
    renderGps();
  }
}

function start() {
  listEl.setAttribute("aria-busy", "true");
  reporter.start();
  const signOut = document.querySelector("form.signout");
  if (signOut) signOut.addEventListener("submit", () => reporter.forget()); // a shared phone keeps no positions
  const indicator = connectionIndicator(() => socket, { not_found: "This account is not a courier's: there are no deliveries to follow." });
  socket = new LiveSocket("courier/", {
    resume: false, // every connect answers a fresh snapshot
    onMessage,
    onState: (state, info) => {
      indicator(state, info);
      if (state === "failed") applySnapshot([]); // no longer this user's to follow: nothing shown or reported
    },
    onServerTime: (ms) => reporter.setServerTime(ms),
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && screen.wanted) holdScreen();
  });
  window.addEventListener("online", () => announce(reporter.queued() ? `Back online: sending ${reporter.queued()} kept positions.` : "Back online."));
  window.addEventListener("offline", () => {
    if (reporter.tracking()) announce("Offline: your positions are kept and sent when the connection returns.");
  });
  setInterval(() => {
    // Watching, but no fix for a while (none since it started, or none since the last).
    const since = Math.max(geo.startedAt, geo.fix ? geo.fix.receivedAt : 0);
    if ((geo.state === "tracking" || geo.state === "waiting") && Date.now() - since > SIGNAL_LOST_MS) signalLost();
  }, 1000);
  followPermission().then(() => {
    renderGps();
    socket.start();
  });
}

start();
