/** Formatting of money, times, durations and distances for display. */
import { config } from "./config.js";

const moneyFormat = new Intl.NumberFormat(undefined, {
  style: "currency",
  currency: config.currency || "USD",
  minimumFractionDigits: 2,
});

/** "18.50" (the API's decimal string) -> "$18.50" in the configured currency. */
export function money(value) {
  if (value === null || value === undefined || value === "") return "–";
  return moneyFormat.format(Number(value));
}

/** ISO time -> "14:05" (local time). */
export function clock(iso) {
  if (!iso) return "–";
  return new Date(iso).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
}

/** Epoch ms or ISO time -> "14:05:09" (local time; for GPS fixes, seconds apart). */
export function clockSeconds(moment) {
  if (moment === null || moment === undefined || moment === "") return "–";
  return new Date(moment).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

/** ISO time -> "12 Mar, 14:05" (or just the time when it is today). */
export function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  const today = new Date();
  if (date.toDateString() === today.toDateString()) return `Today, ${clock(iso)}`;
  return date.toLocaleString(undefined, { day: "numeric", month: "short", hour: "2-digit", minute: "2-digit" });
}

/** Seconds -> "45 s", "4 min 12 s", "1 h 05 min", "2 d 3 h". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, "0")} s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 48) return `${hrs} h ${String(m % 60).padStart(2, "0")} min`;
  return `${Math.floor(hrs / 24)} d ${hrs % 24} h`;
}

/** Seconds -> "in 7 min" style ETA text ("any moment" under a minute). */
export function etaText(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 60) return "any moment now";
  const minutes = Math.round(seconds / 60);
  return minutes < 60 ? `about ${minutes} min` : `about ${duration(seconds)}`;
}

/** Kilometres -> "850 m" / "3.4 km". */
export function distance(km) {
  if (km === null || km === undefined) return "–";
  return km < 1 ? `${Math.round(km * 1000)} m` : `${km.toFixed(1)} km`;
}

/** A signed percentage change -> {text: "+12.5%", direction: "up"|"down"|"flat"|"none"}. */
export function change(pct) {
  if (pct === null || pct === undefined) return { text: "new", direction: "none" };
  if (pct === 0) return { text: "±0%", direction: "flat" };
  return { text: `${pct > 0 ? "+" : "−"}${Math.abs(pct).toFixed(1)}%`, direction: pct > 0 ? "up" : "down" };
}

/** Compact relative time: "just now", "5 min ago". */
export function ago(iso, now = Date.now()) {
  if (!iso) return "–";
  const seconds = (now - new Date(iso).getTime()) / 1000;
  if (seconds < 45) return "just now";
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return when(iso);
}

/** The predicted arrival -> "arrives around 13:42 (13:38–13:49)", in local time. */
export function arrival(eta) {
  if (!eta) return "–";
  return `arrives around ${clock(eta.arrives_at)} (${clock(eta.earliest)}–${clock(eta.latest)})`;
}

/** Minutes a prediction must move before the page says so. */
export const ETA_SHIFT_MINUTES = 3;

/**
 * Follow a prediction as it moves: `tracker` is {reference, note} (or undefined at first),
 * `eta` the new prediction. The reference is the arrival the customer was last told; when
 * the new one is ETA_SHIFT_MINUTES or more away from it, the note says "now later by 6 min"
 * (or earlier) and the new arrival becomes the reference. Returns the next tracker.
 */
export function trackArrival(tracker, eta) {
  if (!eta) return { reference: null, note: tracker ? tracker.note : null };
  const at = Date.parse(eta.arrives_at);
  if (!tracker || tracker.reference === null) return { reference: at, note: null };
  const minutes = Math.round((at - tracker.reference) / 60000);
  if (Math.abs(minutes) < ETA_SHIFT_MINUTES) return tracker;
  return { reference: at, note: `now ${minutes > 0 ? "later" : "earlier"} by ${Math.abs(minutes)} min` };
}
