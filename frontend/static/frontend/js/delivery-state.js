/**
 * One order's live tracking state, as the order page and a shared link's page hold it: the
 * status and when each step was reached, the courier's newest point, the distance left and
 * the arrival window. Both pages follow the same socket messages with the same client rules
 * (docs/api.md, "Live updates": status.js `furthest` and `newestPoint`), so the rules live
 * here once and each page only says how it draws and what it announces.
 *
 * The page passes its hooks: `etaShifted(note)` when the arrival window moved enough to say
 * so, `moveCourier(position)` for the point an `update` carries, `statusMoved()` when the
 * shown status moved on, and `renderDelivery()` to redraw the figures after any message.
 */
import { trackArrival } from "./format.js";
import { furthest, timesFromTimeline } from "./status.js";

export class DeliveryState {
  constructor(page) {
    this.page = page;
    this.version = -1;
    this.status = null;
    this.statusTimes = {};
    this.position = null; // {lat, lon, at}
    this.distanceKm = null;
    this.eta = null; // the predicted arrival {arrives_at, earliest, latest, computed_at, basis}
    this.arrivalTracker = undefined; // what the reader was last told, and whether it moved
  }

  /**
   * A snapshot (or the REST detail) of `order` at `version`: its status, times, distance and
   * arrival replace what is known, except that a status behind the shown one (a snapshot
   * produced before a fast `status`) does not move it back. The courier's point is the page's
   * to take (the pages differ in when they show one). Returns the status shown before.
   */
  fromSnapshot(order, version) {
    const shown = this.status;
    this.version = version;
    this.status = furthest(shown, order.status);
    const times = timesFromTimeline(order.timeline);
    if (this.status !== order.status) times[this.status] = this.statusTimes[this.status];
    this.statusTimes = times;
    this.distanceKm = order.distance_left_km;
    this.setEta(order.eta);
    return shown;
  }

  /** A new arrival window; the page hears of it when it moved far enough to tell the reader. */
  setEta(eta) {
    const before = this.arrivalTracker;
    this.eta = eta || null;
    this.arrivalTracker = trackArrival(before, this.eta);
    if (this.arrivalTracker.note && (!before || before.note !== this.arrivalTracker.note)) {
      this.page.etaShifted(this.arrivalTracker.note);
    }
  }

  /** An enriched `update`: the order's full state at a newer version (an older one is ignored). */
  applyUpdate(message) {
    if (message.version <= this.version) return;
    const previous = this.status;
    this.version = message.version;
    this.status = furthest(previous, message.status);
    this.statusTimes = { ...this.statusTimes, ...(message.status_times || {}) };
    this.distanceKm = message.distance_left_km;
    this.setEta(message.eta);
    if (message.position) this.page.moveCourier(message.position);
    if (previous !== this.status) this.page.statusMoved();
    this.page.renderDelivery();
  }

  /** A fast `status` message: the new status only, ahead of the update with the full state. */
  applyStatus(message) {
    if (furthest(this.status, message.status) === this.status) return;
    this.status = message.status;
    this.statusTimes = { ...this.statusTimes, [message.status]: message.status_time };
    this.page.statusMoved();
    this.page.renderDelivery();
  }
}
