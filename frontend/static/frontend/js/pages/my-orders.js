/**
 * My orders: active orders on top (live status, ETA), past orders below.
 *
 * First paint from the REST API (active, and past with "Show more"); then the
 * customer's order socket keeps every card current. Each order is kept at its
 * highest version and its furthest status (fast `status` messages come ahead of
 * the versioned updates), so a reconnect's snapshot and late updates never go back
 * in time; an order that finishes moves from the active list to the past list.
 */
import { api } from "../api.js";
import { orderUrl, config } from "../config.js";
import { connectionIndicator } from "../connection.js";
import { notificationControl, notifyStatus } from "../notify.js";
import { announce, emptyState, errorState, h, loadingState, replace } from "../dom.js";
import { statusBadge, progressBar } from "../components.js";
import { ago, arrival, distance, money, trackArrival, when } from "../format.js";
import { IN_TRANSIT, furthest, isActive, label } from "../status.js";
import { LiveSocket } from "../live.js";

const PAST_PAGE = 10;
const activeList = document.getElementById("active-orders");
const pastList = document.getElementById("past-orders");
const moreButton = document.getElementById("more-past");

/** order id -> the latest summary we have (REST list shape). */
const orders = new Map();
let pastOffset = 0;
let pastExhausted = false;
let socket = null;

/** Keep the newest version of an order, at its furthest status; returns true when it changed. */
function upsert(summary) {
  const known = orders.get(summary.id);
  if (known && known.version > summary.version) return false;
  const arrivalTracker = "eta" in summary ? trackArrival(known && known.arrivalTracker, summary.eta) : known && known.arrivalTracker;
  const kept = known && furthest(known.status, summary.status) !== summary.status ? { status: known.status, status_label: known.status_label, status_time: known.status_time } : {};
  orders.set(summary.id, { ...known, ...summary, ...kept, arrivalTracker });
  return true;
}

function itemsText(order) {
  const items = order.items || [];
  if (!items.length) return order.item_count ? `${order.item_count} items` : "";
  const shown = items.slice(0, 3).map((i) => `${i.quantity}× ${i.name}`);
  if (items.length > 3) shown.push(`+${items.length - 3} more`);
  return shown.join(", ");
}

function card(order) {
  const active = isActive(order.status);
  const facts = [];
  if (active && order.eta) {
    const shift = order.arrivalTracker && order.arrivalTracker.note;
    facts.push(h("span", { class: "fact fact-eta" }, arrival(order.eta).replace(/^a/, "A"), shift ? h("span", { class: "eta-shift" }, ` · ${shift}`) : null));
  }
  if (active && order.distance_left_km !== null && order.distance_left_km !== undefined && IN_TRANSIT.has(order.status)) {
    facts.push(h("span", { class: "fact" }, `${distance(order.distance_left_km)} away`));
  }
  const title = `Order #${order.id}${order.restaurant && order.restaurant.name ? ` from ${order.restaurant.name}` : ""}`;
  return h(
    "li",
    { class: `order-card ${active ? "is-active" : "is-past"}`, dataset: { orderId: order.id, status: order.status } },
    h(
      "a",
      { class: "order-card-link", href: orderUrl(order.id), "aria-label": `${title}, ${label(order.status)}` },
      h(
        "div",
        { class: "order-card-head" },
        h("span", { class: "order-card-title" }, (order.restaurant && order.restaurant.name) || `Order #${order.id}`),
        statusBadge(order.status),
      ),
      h("p", { class: "order-card-items" }, itemsText(order)),
      active ? progressBar(order.status) : null,
      h(
        "div",
        { class: "order-card-foot" },
        h("span", { class: "muted" }, `#${order.id} · ${when(order.created_at)}`),
        ...facts,
        h("span", { class: "order-card-total" }, money(order.total)),
      ),
      active ? h("p", { class: "order-card-updated muted" }, `Updated ${ago(order.status_time)}`) : null,
    ),
  );
}

function sorted(filter) {
  return [...orders.values()].filter(filter).sort((a, b) => String(b.created_at).localeCompare(String(a.created_at)) || b.id - a.id);
}

function render() {
  const active = sorted((o) => isActive(o.status));
  const past = sorted((o) => !isActive(o.status));
  document.getElementById("active-count").textContent = active.length ? String(active.length) : "";
  replace(
    activeList,
    active.length
      ? active.map(card)
      : h("li", {}, emptyState("No active orders", "When you place an order it shows up here with its live status.", h("a", { class: "btn btn-primary", href: config.urls.placeOrder }, "Order food"))),
  );
  replace(pastList, past.length ? past.map(card) : h("li", {}, emptyState("No past orders yet", "Delivered and cancelled orders are kept here.")));
  moreButton.hidden = pastExhausted;
}

async function loadMorePast() {
  moreButton.disabled = true;
  try {
    const page = await api(`orders/?state=past&limit=${PAST_PAGE}&offset=${pastOffset}`);
    page.results.forEach(upsert);
    pastOffset += page.results.length;
    pastExhausted = !page.next;
    render();
  } catch (error) {
    replace(pastList, h("li", {}, errorState(error, loadMorePast)));
  } finally {
    moreButton.disabled = false;
  }
}

/** A live update: apply it, or fetch the order if it is new to this page. */
async function applyUpdate(message) {
  const known = orders.get(message.order_id);
  if (!known) {
    try {
      const detail = await api(`orders/${message.order_id}/`);
      upsert({ ...detail, version: message.version, items: detail.items.map((i) => ({ name: i.name, quantity: i.quantity })) });
      render();
      announce(`New order #${message.order_id}: ${label(message.status)}.`);
    } catch {
      /* It will appear on the next snapshot. */
    }
    return;
  }
  const before = known.status;
  const changed = upsert({
    id: message.order_id,
    version: message.version,
    status: message.status,
    status_label: message.status_label,
    status_time: message.status_time,
    distance_left_km: message.distance_left_km,
    eta: message.eta,
    total: message.total,
  });
  if (!changed) return;
  render();
  if (before !== orders.get(message.order_id).status) statusMoved(known, message.status);
}

/** A fast `status` message: move a card on at once (new orders wait for their update). */
function applyStatus(message) {
  const known = orders.get(message.order_id);
  if (!known || furthest(known.status, message.status) === known.status) return;
  orders.set(known.id, { ...known, status: message.status, status_label: message.status_label, status_time: message.status_time });
  render();
  statusMoved(known, message.status);
}

function statusMoved(order, status) {
  const name = order.restaurant && order.restaurant.name ? ` from ${order.restaurant.name}` : "";
  announce(`Order #${order.id}${name} is now: ${label(status)}.`);
  notifyStatus(order.id, status);
}

function onMessage(message) {
  if (message.type === "snapshot") {
    (message.orders || []).forEach(upsert);
    render();
  } else if (message.type === "update") {
    applyUpdate(message);
  } else if (message.type === "status") {
    applyStatus(message);
  }
}

async function start() {
  replace(activeList, h("li", {}, loadingState("Loading your orders…")));
  replace(pastList, h("li", {}, loadingState()));
  moreButton.hidden = true;
  moreButton.addEventListener("click", loadMorePast);
  try {
    const [active, past] = await Promise.all([api("orders/?state=active&limit=50"), api(`orders/?state=past&limit=${PAST_PAGE}`)]);
    active.results.forEach(upsert);
    past.results.forEach(upsert);
    pastOffset = past.results.length;
    pastExhausted = !past.next;
    render();
  } catch (error) {
    replace(activeList, h("li", {}, errorState(error, start)));
    replace(pastList);
    return;
  }
  notificationControl(document.getElementById("notify-slot"));
  if (!socket) {
    socket = new LiveSocket("orders/", { onMessage, onState: connectionIndicator(() => socket), resume: false }).start();
    setInterval(render, 30000); // relative times ("2 min ago") stay true without a reload
  }
}

if (config.user.roles.includes("customer")) start();
