/**
 * The kitchen board: one restaurant's active orders in columns by status, live.
 *
 * /ws/restaurants/<id>/ sends the active orders (snapshot), then every change to
 * this restaurant's orders (and nothing of any other restaurant's). The buttons
 * move an order through the same REST transitions (and services) as every other
 * client, naming the target status so a double click cannot skip a step. The card
 * moves at once (optimistic) and moves back, with the server's reason, if refused.
 * A new order flashes (and, when switched on, chimes).
 */
import { api } from "../api.js";
import { config, orderUrl } from "../config.js";
import { connectionIndicator } from "../connection.js";
import { announce, errorState, h, replace, toast } from "../dom.js";
import { ago, duration, money } from "../format.js";
import { furthest, label, rank } from "../status.js";
import { LiveSocket } from "../live.js";

const restaurantId = config.restaurant.id;
const COLUMNS = [
  { id: "new", title: "New", statuses: ["PLACED_ORDER"] },
  { id: "confirmed", title: "Confirmed", statuses: ["ORDER_CONFIRMED"] },
  { id: "preparing", title: "Preparing", statuses: ["BEING_PREPARED"] },
  { id: "oven", title: "In the oven", statuses: ["BEING_COOKED"] },
  { id: "road", title: "With the courier", statuses: ["OUT_FOR_DELIVERY", "ARRIVING_AT_DOOR"] },
];
/** The kitchen's next step from each status, and what the button says. */
const NEXT = {
  PLACED_ORDER: ["ORDER_CONFIRMED", "Confirm"],
  ORDER_CONFIRMED: ["BEING_PREPARED", "Start preparing"],
  BEING_PREPARED: ["BEING_COOKED", "Into the oven"],
  BEING_COOKED: ["OUT_FOR_DELIVERY", "Hand to courier"],
};
const CANCELLABLE = new Set(["PLACED_ORDER", "ORDER_CONFIRMED", "BEING_PREPARED", "BEING_COOKED"]);
const FINISHED = new Set(["DELIVERED", "CANCELLED"]);
const LATE_SECONDS = 600; // a card waiting this long in one status is flagged
const NEW_FLASH_MS = 8000;

const boardEl = document.getElementById("board");
const summaryEl = document.getElementById("board-summary");
const soundToggle = document.getElementById("sound-toggle");

/** order id -> {id, status, statusTime, createdAt, items, total, customer, version, pending, fresh} */
const orders = new Map();
const columnBodies = new Map();
let socket = null;
let ready = false;

const shownStatus = (o) => (o.pending ? o.pending.to : o.status);

// ------------------------------------------------------------------ layout

function build() {
  replace(
    boardEl,
    COLUMNS.map((col) => {
      const body = h("ol", { class: "kanban-list", "aria-labelledby": `col-${col.id}-title` });
      const count = h("span", { class: "count-badge", id: `col-${col.id}-count` }, "0");
      columnBodies.set(col.id, { body, count });
      return h(
        "section",
        { class: "kanban-col", dataset: { column: col.id }, "aria-labelledby": `col-${col.id}-title` },
        h("h2", { class: "kanban-title", id: `col-${col.id}-title` }, col.title, " ", count),
        body,
      );
    }),
  );
  boardEl.setAttribute("aria-busy", "false");
}

function columnOf(status) {
  return COLUMNS.find((c) => c.statuses.includes(status));
}

function card(o) {
  const status = shownStatus(o);
  const seconds = o.statusTime ? (Date.now() - Date.parse(o.statusTime)) / 1000 : null;
  const late = seconds !== null && seconds > LATE_SECONDS && status in NEXT;
  const next = NEXT[status];
  const actions = [];
  if (next) {
    actions.push(h("button", { type: "button", class: "btn btn-primary btn-small", disabled: !!o.pending, dataset: { action: "advance" }, onclick: () => advance(o.id, next[0]) }, next[1]));
  }
  if (CANCELLABLE.has(status)) {
    actions.push(h("button", { type: "button", class: "btn btn-ghost btn-small btn-cancel", disabled: !!o.pending, dataset: { action: "cancel" }, "aria-label": `Cancel order ${o.id}`, onclick: (e) => cancel(o.id, e.currentTarget) }, "Cancel"));
  }
  return h(
    "li",
    { class: `ticket${o.fresh ? " ticket-new" : ""}${o.pending ? " ticket-pending" : ""}${late ? " ticket-late" : ""}`, dataset: { orderId: o.id, status } },
    h(
      "div",
      { class: "ticket-head" },
      h("a", { href: orderUrl(o.id), class: "ticket-id" }, `#${o.id}`),
      o.fresh ? h("span", { class: "ticket-flag" }, "New") : null,
      h("span", { class: `ticket-age${late ? " warn" : ""}`, title: `In ${label(status)} since ${o.statusTime || "–"}` }, seconds === null ? "" : duration(seconds)),
    ),
    h("p", { class: "ticket-meta muted" }, `${o.customer || "Customer"} · ${money(o.total)} · placed ${ago(o.createdAt)}`),
    o.items.length ? h("ul", { class: "ticket-items" }, o.items.map((i) => h("li", {}, h("strong", {}, `${i.quantity}×`), ` ${i.name}`))) : null,
    o.pending ? h("p", { class: "ticket-saving muted", role: "status" }, o.pending.to === "CANCELLED" ? "Cancelling…" : "Saving…") : null,
    actions.length ? h("div", { class: "ticket-actions" }, actions) : null,
  );
}

function render() {
  const byColumn = new Map(COLUMNS.map((c) => [c.id, []]));
  for (const o of orders.values()) {
    const col = columnOf(shownStatus(o));
    if (col) byColumn.get(col.id).push(o);
  }
  const focusedId = document.activeElement?.closest?.(".ticket")?.dataset.orderId;
  const focusedAction = document.activeElement?.dataset?.action;
  for (const col of COLUMNS) {
    const list = byColumn.get(col.id).sort((a, b) => Date.parse(a.createdAt) - Date.parse(b.createdAt) || a.id - b.id);
    const { body, count } = columnBodies.get(col.id);
    replace(body, list.length ? list.map(card) : h("li", { class: "kanban-empty muted" }, "Nothing here"));
    count.textContent = String(list.length);
  }
  if (focusedId) {
    const again = boardEl.querySelector(`.ticket[data-order-id="${focusedId}"] [data-action="${focusedAction}"]`) || boardEl.querySelector(`.ticket[data-order-id="${focusedId}"] a`);
    again?.focus();
  }
  const kitchen = [...orders.values()].filter((o) => shownStatus(o) in NEXT).length;
  summaryEl.textContent = `${kitchen} order${kitchen === 1 ? "" : "s"} in the kitchen · ${orders.size - kitchen} with couriers`;
}

// ------------------------------------------------------------------ data

function fromSummary(s) {
  return {
    id: s.id,
    status: s.status,
    statusTime: s.status_time,
    createdAt: s.created_at,
    items: s.items || [],
    total: s.total,
    customer: s.customer ? s.customer.name : null,
    version: s.version ?? 0,
    pending: null,
    fresh: false,
  };
}

function markFresh(o) {
  o.fresh = true;
  chime();
  announce(`New order #${o.id}.`);
  setTimeout(() => {
    o.fresh = false;
    render();
  }, NEW_FLASH_MS);
}

async function fetchNewOrder(message) {
  // An order the board has not seen: its lines come from the REST detail.
  const placeholder = { ...fromSummary({ id: message.order_id, status: message.status, status_time: message.status_time, created_at: message.status_times?.PLACED_ORDER || message.status_time, total: message.total, items: [], version: message.version }) };
  orders.set(placeholder.id, placeholder);
  if (message.status === "PLACED_ORDER") markFresh(placeholder);
  render();
  try {
    const detail = await api(`orders/${message.order_id}/`);
    const o = orders.get(message.order_id);
    if (!o) return;
    o.items = detail.items.map((i) => ({ name: i.name, quantity: i.quantity }));
    o.customer = detail.customer.name;
    o.createdAt = detail.created_at;
    render();
  } catch {
    /* The card still shows status and total; the lines come with the next snapshot. */
  }
}

function onMessage(message) {
  if (message.type === "snapshot") {
    const known = new Map(orders);
    orders.clear();
    for (const s of message.orders) {
      const o = fromSummary(s);
      const was = known.get(o.id);
      o.pending = (was && was.pending) || null;
      if (was && furthest(o.status, was.status) !== o.status) [o.status, o.statusTime] = [was.status, was.statusTime];
      orders.set(o.id, o);
      if (ready && !known.has(o.id) && o.status === "PLACED_ORDER") markFresh(o);
    }
    ready = true;
    render();
    return;
  }
  if (message.restaurant_id !== restaurantId) return;
  const o = orders.get(message.order_id);
  if (message.type === "status") {
    if (o) moveOn(o, message); // a fast status (no version); new orders wait for their update
    return;
  }
  if (message.type !== "update") return;
  if (!o) {
    if (!FINISHED.has(message.status)) fetchNewOrder(message);
    return;
  }
  if (message.version <= o.version) return;
  o.version = message.version;
  moveOn(o, message);
}

/** Show a message's status if it is further along than the card's (status.js `furthest`). */
function moveOn(o, message) {
  if (furthest(o.status, message.status) === o.status) return;
  o.status = message.status;
  o.statusTime = message.status_time;
  if (o.pending && rank(o.status) >= rank(o.pending.to)) o.pending = null;
  if (FINISHED.has(o.status) && !o.pending) {
    orders.delete(o.id);
    if (o.status === "CANCELLED") announce(`Order #${o.id} was cancelled.`);
  }
  render();
}

// ------------------------------------------------------------------ actions

async function transition(id, to, request) {
  const o = orders.get(id);
  if (!o || o.pending) return;
  const from = o.status;
  o.pending = { from, to };
  render(); // optimistic: the card moves now
  try {
    const detail = await request();
    const current = orders.get(id);
    if (!current) return;
    current.pending = null;
    if (rank(detail.status) > rank(current.status)) {
      current.status = detail.status;
      current.statusTime = detail.status_time;
    }
    if (FINISHED.has(current.status)) orders.delete(id);
    announce(`Order #${id}: ${label(detail.status)}.`);
  } catch (error) {
    const current = orders.get(id);
    if (current) current.pending = null; // roll back to what the server last said
    toast(`Order #${id} could not move to “${label(to)}”: ${error.message}`, "error");
  }
  render();
}

function advance(id, to) {
  return transition(id, to, () => api(`orders/${id}/advance/`, { method: "POST", body: { status: to } }));
}

/** Cancel takes two presses: the first turns the button into "Confirm cancel" for a few seconds. */
function cancel(id, button) {
  if (button.dataset.armed !== "1") {
    button.dataset.armed = "1";
    button.textContent = "Confirm cancel";
    button.setAttribute("aria-label", `Confirm cancel: order ${id}`);
    button.classList.add("btn-danger-outline");
    announce(`Press again to cancel order #${id}.`);
    setTimeout(() => {
      if (button.isConnected && button.dataset.armed === "1") {
        button.dataset.armed = "";
        button.textContent = "Cancel";
        button.setAttribute("aria-label", `Cancel order ${id}`);
        button.classList.remove("btn-danger-outline");
      }
    }, 4000);
    return;
  }
  transition(id, "CANCELLED", () => api(`orders/${id}/cancel/`, { method: "POST" }));
}

// ------------------------------------------------------------------ new-order cue

let audio = null;

function chime() {
  if (!soundToggle.checked) return;
  try {
    audio = audio || new AudioContext();
    const now = audio.currentTime;
    for (const [i, freq] of [880, 1320].entries()) {
      const osc = audio.createOscillator();
      const gain = audio.createGain();
      osc.frequency.value = freq;
      gain.gain.setValueAtTime(0.0001, now + i * 0.18);
      gain.gain.exponentialRampToValueAtTime(0.25, now + i * 0.18 + 0.02);
      gain.gain.exponentialRampToValueAtTime(0.0001, now + i * 0.18 + 0.16);
      osc.connect(gain).connect(audio.destination);
      osc.start(now + i * 0.18);
      osc.stop(now + i * 0.18 + 0.17);
    }
  } catch {
    /* No audio here: the visual cue remains. */
  }
}

// ------------------------------------------------------------------ start

function start() {
  build();
  const key = `ordertrack.sound.${restaurantId}`;
  soundToggle.checked = localStorage.getItem(key) === "1";
  soundToggle.addEventListener("change", () => {
    localStorage.setItem(key, soundToggle.checked ? "1" : "0");
    if (soundToggle.checked) chime(); // a user gesture: lets the browser play later chimes
  });
  socket = new LiveSocket(`restaurants/${restaurantId}/`, {
    resume: false, // a reconnect gets a fresh snapshot of the active orders
    onMessage,
    onState: (state, info) => {
      indicator(state, info);
      if (state === "failed") replace(boardEl, errorState(new Error("This board cannot be followed (signed out, or no longer your restaurant).")));
    },
  });
  const indicator = connectionIndicator(() => socket);
  socket.start();
  setInterval(() => {
    if (!document.hidden && ready && !boardEl.contains(document.activeElement)) render(); // ages tick
  }, 15000);
}

start();
