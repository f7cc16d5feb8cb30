/**
 * The operators' fleet map: every courier on the road, moving, coloured by how late
 * its order runs against the arrival predicted at pickup; a click opens the order.
 *
 * Fed by `fleet` messages on /ws/operations/ (each courier at most once a second; docs/api.md,
 * "Fleet"). Markers are canvas circles and one animation frame moves every courier that is
 * gliding, so a thousand couriers cost one redraw a frame, not a thousand DOM moves.
 */
import { orderUrl } from "./config.js";
import { h, replace } from "./dom.js";
import { L, createMap } from "./map.js";
import { newestPoint } from "./status.js";

/** A courier not heard from for this long has left the road (ms). */
const SILENT_MS = 60000;
/** A move glides over about the time between fixes, at most this (ms). */
const GLIDE_MS = 1000;

/** Lateness bands: label, colour, from this many seconds late. */
export const BANDS = [
  { key: "unknown", label: "No prediction yet", color: "#8a94a8" },
  { key: "on-time", label: "On time (< 2 min late)", color: "#15803d", from: -Infinity },
  { key: "late", label: "2–10 min late", color: "#d97706", from: 120 },
  { key: "very-late", label: "Over 10 min late", color: "#dc2626", from: 600 },
];

export function band(lateSeconds) {
  if (lateSeconds === null || lateSeconds === undefined) return BANDS[0];
  return BANDS.slice(1).reduce((found, b) => (lateSeconds >= b.from ? b : found), BANDS[1]);
}

function lateText(lateSeconds) {
  if (lateSeconds === null || lateSeconds === undefined) return "no prediction yet";
  const minutes = Math.round(Math.abs(lateSeconds) / 60);
  if (minutes === 0) return "on time";
  return lateSeconds > 0 ? `${minutes} min late` : `${minutes} min early`;
}

export class FleetMap {
  constructor(element, { legend, summary }) {
    this.map = createMap(element, { label: "Fleet map: every courier on the road, coloured by how late the order runs" });
    this.renderer = L.canvas({ padding: 0.2 });
    this.couriers = new Map(); // courier id -> {marker, point, from, to, start, band}
    this.summary = summary;
    this.frame = null;
    this.drawLegend(legend);
    this.summaryTimer = setInterval(() => this.forgetSilent(), 5000);
    element.fleetMap = this; // for tests and the frame-time bench: where each courier is drawn
  }

  /** Where courier `id` is drawn now, [lat, lon] (null: not on the map). */
  drawnAt(id) {
    const c = this.couriers.get(id);
    if (!c) return null;
    const at = c.marker.getLatLng();
    return [at.lat, at.lng];
  }

  drawLegend(legend) {
    replace(
      legend,
      BANDS.map((b) => h("span", { class: "legend-item" }, h("span", { class: "legend-swatch", style: { background: b.color } }), b.label)),
    );
  }

  /** One `fleet` message: place or move each courier, drop the gone. */
  apply(message) {
    const now = performance.now();
    for (const point of message.couriers) this.place(point, now);
    for (const id of message.gone) this.remove(id);
    this.renderSummary();
    if (!this.frame) this.frame = requestAnimationFrame((t) => this.step(t));
  }

  place(point, now) {
    const known = this.couriers.get(point.courier_id);
    const colour = band(point.late_seconds);
    const title = `Courier ${point.courier_id} · order #${point.order_id} · ${lateText(point.late_seconds)}`;
    if (!known) {
      const marker = L.circleMarker([point.lat, point.lon], {
        renderer: this.renderer,
        radius: 7,
        weight: 2,
        color: "#ffffff",
        fillColor: colour.color,
        fillOpacity: 0.95,
      })
        .bindTooltip(title)
        .on("click", () => window.location.assign(orderUrl(this.couriers.get(point.courier_id).point.order_id)))
        .addTo(this.map);
      this.couriers.set(point.courier_id, { marker, point, from: null, to: null, start: 0, band: colour, heard: Date.now() });
      return;
    }
    known.heard = Date.now();
    if (newestPoint(known.point, point) !== point) return; // an older fix than the one shown
    known.point = point;
    known.from = known.marker.getLatLng();
    known.to = L.latLng(point.lat, point.lon);
    known.start = now;
    known.marker.setTooltipContent(title);
    if (known.band !== colour) {
      known.band = colour;
      known.marker.setStyle({ fillColor: colour.color });
    }
  }

  remove(id) {
    const known = this.couriers.get(id);
    if (!known) return;
    known.marker.remove();
    this.couriers.delete(id);
  }

  /** One animation frame: every gliding courier a step further. */
  step(now) {
    this.frame = null;
    let moving = false;
    for (const c of this.couriers.values()) {
      if (!c.to) continue;
      const t = Math.min(1, (now - c.start) / GLIDE_MS);
      c.marker.setLatLng(t >= 1 ? c.to : L.latLng(c.from.lat + (c.to.lat - c.from.lat) * t, c.from.lng + (c.to.lng - c.from.lng) * t));
      if (t >= 1) c.to = null;
      else moving = true;
    }
    if (moving) this.frame = requestAnimationFrame((t) => this.step(t));
  }

  forgetSilent() {
    const cutoff = Date.now() - SILENT_MS;
    for (const [id, c] of this.couriers) if (c.heard < cutoff) this.remove(id);
    this.renderSummary();
  }

  renderSummary() {
    const counts = new Map(BANDS.map((b) => [b.key, 0]));
    for (const c of this.couriers.values()) counts.set(c.band.key, counts.get(c.band.key) + 1);
    const parts = BANDS.filter((b) => counts.get(b.key)).map((b) => `${counts.get(b.key)} ${b.key === "unknown" ? "without a prediction" : b.label.split(" (")[0].toLowerCase()}`);
    const text = `${this.couriers.size} courier${this.couriers.size === 1 ? "" : "s"} on the road${parts.length ? `: ${parts.join(", ")}` : ""}.`;
    if (this.summary.textContent !== text) this.summary.textContent = text;
    this.summary.dataset.couriers = String(this.couriers.size);
  }
}
