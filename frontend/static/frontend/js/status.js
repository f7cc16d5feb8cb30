/**
 * The order lifecycle as the pages show it: labels, badges, and the seven-step
 * timeline computed from the status and the time each status was entered (so a
 * live update, which carries `status_times`, redraws it exactly like a snapshot).
 */

import { config } from "./config.js";

/** The seven steps of the happy path, in order: the event contract's, from the page config. */
export const LIFECYCLE = config.lifecycle;

export const LABELS = {
  PLACED_ORDER: "Order placed",
  ORDER_CONFIRMED: "Confirmed",
  BEING_PREPARED: "Being prepared",
  BEING_COOKED: "In the oven",
  OUT_FOR_DELIVERY: "Out for delivery",
  ARRIVING_AT_DOOR: "Arriving at your door",
  DELIVERED: "Delivered",
  CANCELLED: "Cancelled",
};

/** Statuses in which a courier is on the road (the map follows it). */
export const IN_TRANSIT = new Set(["OUT_FOR_DELIVERY", "ARRIVING_AT_DOOR"]);

/** Position in the lifecycle; CANCELLED ranks after everything (it is terminal), unknown -1. */
export function rank(status) {
  return status === "CANCELLED" ? LIFECYCLE.length : LIFECYCLE.indexOf(status);
}

/**
 * The status to show, given the one shown and one just received: the further along.
 * The one rule every page applies to every message that carries a status (README,
 * "Live updates"). Statuses only move forward and CANCELLED is terminal, so a status
 * behind the shown one is old news: a fast `status` message (no version) is applied
 * only when it moves the order on, and a later enriched `update` or snapshot that
 * the stream job produced before it never moves the shown status back.
 */
export function furthest(shown, received) {
  return rank(received) > rank(shown) ? received : shown;
}

/**
 * The courier point to show: the newest by its time `at`, whichever path brought it (a
 * fast `position` message, or an enriched `update` that may come later with an older
 * point). Docs: docs/api.md, "Live updates".
 */
export function newestPoint(shown, received) {
  if (!received) return shown;
  if (!shown) return received;
  return Date.parse(received.at) > Date.parse(shown.at) ? received : shown;
}

export function label(status) {
  return LABELS[status] || String(status || "").replaceAll("_", " ").toLowerCase();
}

export function isActive(status) {
  return status !== "DELIVERED" && status !== "CANCELLED";
}

/** The badge colour group of a status. */
export function tone(status) {
  if (status === "DELIVERED") return "done";
  if (status === "CANCELLED") return "cancelled";
  if (IN_TRANSIT.has(status)) return "transit";
  if (status === "PLACED_ORDER" || status === "ORDER_CONFIRMED") return "new";
  return "kitchen";
}

/** Progress through the lifecycle, 0..1 (for progress bars). */
export function progress(status) {
  if (status === "CANCELLED") return 1;
  const index = LIFECYCLE.indexOf(status);
  return index < 0 ? 0 : index / (LIFECYCLE.length - 1);
}

/** Status times (status -> ISO) from a REST/snapshot timeline. */
export function timesFromTimeline(timeline) {
  const times = {};
  for (const step of timeline || []) if (step.entered_at) times[step.status] = step.entered_at;
  return times;
}

/**
 * The steps to draw: [{status, label, state: done|current|pending|skipped,
 * enteredAt (ms|null), seconds (number|null), running (bool)}].
 * The current step's duration runs until `now` (it is still going on).
 */
export function buildTimeline(current, statusTimes, now = Date.now()) {
  const cancelled = current === "CANCELLED";
  const steps = cancelled ? [...LIFECYCLE, "CANCELLED"] : [...LIFECYCLE];
  const entered = Object.entries(statusTimes || {})
    .map(([status, iso]) => [status, new Date(iso).getTime()])
    .sort((a, b) => a[1] - b[1] || steps.indexOf(a[0]) - steps.indexOf(b[0]));
  const at = Object.fromEntries(entered);
  const nextTime = (status) => {
    const index = entered.findIndex(([s]) => s === status);
    return index >= 0 && index + 1 < entered.length ? entered[index + 1][1] : null;
  };
  return steps.map((status) => {
    const enteredAt = at[status] ?? null;
    const isCurrent = status === current;
    if (enteredAt === null) {
      return { status, label: label(status), state: cancelled ? "skipped" : "pending", enteredAt: null, seconds: null, running: false };
    }
    const end = nextTime(status);
    const final = status === "DELIVERED" || status === "CANCELLED";
    const running = isCurrent && !final && end === null;
    const seconds = end !== null ? (end - enteredAt) / 1000 : running ? (now - enteredAt) / 1000 : null;
    return { status, label: label(status), state: isCurrent ? "current" : "done", enteredAt, seconds, running };
  });
}
