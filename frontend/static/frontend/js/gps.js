/**
 * A courier's GPS reports from the phone: positions queued per order and posted in batches
 * to POST /api/v1/orders/{id}/locations/ within the server's points budget, so the page
 * never sends what the server would refuse. The budget comes from the settings through the
 * page config (`gps`: api/throttles.py LocationPointsThrottle, the `locations` request
 * rate, the largest batch and how far ahead of its clock the server takes a point).
 *
 * The rules (docs/api.md, "The courier's page"):
 *
 * - Sampling: at most one point a second per order (a fix within a second of the last
 *   queued one replaces it), each with its `recorded_at`: the fix's time, moved by the
 *   server's clock when the phone's is off by more than CLOCK_TRUST_MS.
 * - Batching: one request per order every SEND_EVERY_MS (longer when the request rate
 *   needs it), at most `batchMax` points a request, oldest first.
 * - Budget: a copy of the server's bucket per order (`burst` points, refilled at
 *   `pointsPerSecond`). A batch never spends more than the copy holds: when the queue
 *   holds more, it is thinned evenly (`thin`) to what the copy holds, its oldest and
 *   newest points kept.
 * - Offline: points stay queued (in sessionStorage too, so a reload keeps them) and go
 *   when the connection returns, within the budget as above. A queue holds at most
 *   `burst` points; past that it is thinned evenly to three quarters of it.
 * - 429: nothing more goes to that order before its Retry-After, and the copy of the
 *   bucket is set so that the refused batch fits exactly then: never retried into a 429.
 * - Stale: before each batch, a point is dropped when it is older than the burst's span at
 *   one point a second (1,200 points: 20 minutes; by then it says nothing of where the
 *   courier is, and a queue that old has been thinned anyway), older than its order, or
 *   further ahead of the server's clock than the server takes (`aheadSeconds`). An order
 *   that leaves the road or the courier drops its queue: the server would refuse every
 *   point of it (400, 404).
 *
 * Network failures and 5xx answers keep the points and try again with backoff (points
 * are idempotent on the server).
 */
import { ApiError, api } from "./api.js";

/** At most one point a second: the server's refill (2/s) then always keeps up. */
export const SAMPLE_MS = 1000;
const SEND_EVERY_MS = 5000;
const BACKOFF_START_MS = 2000;
const BACKOFF_MAX_MS = 60000;
/** A phone clock within this of the server's is used as it is (latency blurs the offset). */
const CLOCK_TRUST_MS = 5000;
const SAVE_EVERY_MS = 2000;

/**
 * `n` of `points` spread evenly by position, the first and the last always kept (one
 * point: the newest). The points are in time order; so is the result.
 */
export function thin(points, n) {
  if (n >= points.length) return points.slice();
  if (n <= 0) return [];
  if (n === 1) return [points[points.length - 1]];
  const step = (points.length - 1) / (n - 1); // >= 1, so the indexes never repeat
  const kept = [];
  for (let i = 0; i < n; i += 1) kept.push(points[Math.round(i * step)]);
  return kept;
}

/** The page's copy of the server's token bucket for one order's points. */
export class PointsBucket {
  constructor(burst, perSecond, now = Date.now()) {
    this.burst = burst;
    this.rate = perSecond;
    this.tokens = burst;
    this.at = now;
    this.until = 0; // a 429's Retry-After: nothing is sent before
  }

  level(now) {
    return Math.min(this.burst, this.tokens + ((now - this.at) / 1000) * this.rate);
  }

  /** Whole points a batch may carry now. */
  available(now) {
    return now < this.until ? 0 : Math.max(0, Math.floor(this.level(now)));
  }

  spend(n, now) {
    this.tokens = this.level(now) - n;
    this.at = now;
  }

  /** A batch of `n` was refused (429): wait `seconds`, after which the bucket holds `n`. */
  refused(n, seconds, now) {
    const wait = Math.max(1, Number.isFinite(seconds) ? seconds : 1);
    this.until = now + wait * 1000;
    this.tokens = Math.min(n, this.burst) - wait * this.rate;
    this.at = now;
  }
}

/** The default request: the REST command, through the API client (session + CSRF). */
function post(orderId, points) {
  return api(`orders/${orderId}/locations/`, { method: "POST", body: { points } });
}

/**
 * Queues and sends the courier's points for the orders on the road.
 *
 * `track(id, createdAt)` an order whose points are wanted, `untrack(id)` one that left the
 * road (its queue goes), `add(fix)` a GPS fix `{lat, lon, at, accuracy}` (`at` epoch ms on
 * the phone's clock), `flush(id)` send what the budget allows now. `onChange(reporter)` runs
 * after every change, for the page to show `orders` (per order: queued, sentAt, lastAt,
 * error, retryAt) and `offline`.
 */
export class Reporter {
  constructor(rules, { storageKey = null, onChange = () => {}, send = post } = {}) {
    this.rules = rules;
    this.maxAgeMs = (rules.burst / (1000 / SAMPLE_MS)) * 1000;
    this.storageKey = storageKey;
    this.onChange = onChange;
    this.send = send;
    /** @type {Map<number, {id: number, createdAt: number, queue: object[], flying: Set<object>, bucket: PointsBucket, flushing: Promise|null, retryAt: number, backoff: number, sentAt: number|null, sent: number, dropped: number, error: string|null}>} */
    this.orders = new Map();
    this.saved = this.load(); // queues kept from before a reload, by order id
    this.offsetMs = 0;
    this.offline = typeof navigator !== "undefined" && navigator.onLine === false;
    this.timer = null;
    this.saveTimer = null;
    this.onOnline = () => {
      this.offline = false;
      this.changed();
      this.tick();
    };
    this.onOffline = () => {
      this.offline = true;
      this.changed();
    };
  }

  start() {
    window.addEventListener("online", this.onOnline);
    window.addEventListener("offline", this.onOffline);
    this.schedule();
    return this;
  }

  stop() {
    clearTimeout(this.timer);
    window.removeEventListener("online", this.onOnline);
    window.removeEventListener("offline", this.onOffline);
  }

  /** The server's clock, from the socket: applied when the phone's is off by more than CLOCK_TRUST_MS. */
  setServerTime(serverMs) {
    const offset = serverMs - Date.now();
    this.offsetMs = Math.abs(offset) > CLOCK_TRUST_MS ? offset : 0;
  }

  track(id, createdAt) {
    if (this.orders.has(id)) return;
    const queue = (this.saved.get(id) || []).filter((p) => Number.isFinite(p.at));
    this.saved.delete(id);
    this.orders.set(id, {
      id,
      createdAt: Date.parse(createdAt) || 0,
      queue,
      flying: new Set(),
      bucket: new PointsBucket(this.rules.burst, this.rules.pointsPerSecond),
      flushing: null,
      retryAt: 0,
      backoff: BACKOFF_START_MS,
      sentAt: null,
      sent: 0,
      dropped: 0,
      error: null,
    });
    this.changed();
  }

  untrack(id) {
    if (!this.orders.delete(id)) return;
    this.saved.delete(id);
    this.changed();
  }

  tracking() {
    return this.orders.size > 0;
  }

  queued() {
    let n = 0;
    for (const o of this.orders.values()) n += o.queue.length;
    return n;
  }

  add(fix) {
    if (!this.orders.size) return;
    for (const o of this.orders.values()) {
      const point = { lat: fix.lat, lon: fix.lon, at: fix.at };
      const last = o.queue[o.queue.length - 1];
      if (last && !o.flying.has(last) && fix.at - last.at < SAMPLE_MS) o.queue[o.queue.length - 1] = point;
      else if (!last || fix.at > last.at) o.queue.push(point);
      if (o.queue.length > this.rules.burst) {
        const before = o.queue.length;
        o.queue = thin(o.queue, Math.floor((this.rules.burst * 3) / 4));
        o.dropped += before - o.queue.length;
      }
    }
    this.changed();
  }

  /** Drop the points the server would not take or that say nothing any more (the rule above). */
  prune(o, now) {
    const before = o.queue.length;
    const ahead = this.rules.aheadSeconds * 1000;
    o.queue = o.queue.filter((p) => o.flying.has(p) || (now - p.at <= this.maxAgeMs && p.at <= now + ahead && p.at + this.offsetMs >= o.createdAt));
    o.dropped += before - o.queue.length;
  }

  /** How long between two requests for one order: SEND_EVERY_MS, or what the request rate allows. */
  interval() {
    const perRequest = 60000 / Math.max(1e-6, this.rules.requestsPerMinute);
    return Math.max(SEND_EVERY_MS, perRequest * Math.max(1, this.orders.size));
  }

  schedule() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.tick();
      this.schedule();
    }, this.interval());
  }

  tick() {
    for (const id of this.orders.keys()) this.flush(id);
  }

  /**
   * Send what the order's queue holds, as far as the budget allows now (several batches
   * when it holds more than one). Resolves once the queue is sent or can go no further now;
   * a flush already running is joined, not doubled.
   */
  flush(id) {
    const o = this.orders.get(id);
    if (!o) return Promise.resolve();
    if (!o.flushing) o.flushing = this.drain(o).finally(() => (o.flushing = null));
    return o.flushing;
  }

  async drain(o) {
    const id = o.id;
    if (this.offline) return;
    try {
      for (;;) {
        const now = Date.now();
        if (now < o.retryAt || this.orders.get(id) !== o) return;
        this.prune(o, now);
        if (!o.queue.length) return;
        const room = o.bucket.available(now);
        if (room < 1) {
          const refill = Math.ceil((1 - o.bucket.level(now)) / Math.max(o.bucket.rate, 1e-3)) * 1000;
          o.retryAt = Math.max(o.bucket.until, now + refill);
          return;
        }
        if (o.queue.length > room) {
          const before = o.queue.length;
          o.queue = thin(o.queue, room);
          o.dropped += before - o.queue.length;
        }
        const batch = o.queue.slice(0, Math.min(this.rules.batchMax, room));
        if (!(await this.post(o, batch))) return;
      }
    } finally {
      this.changed();
    }
  }

  /** One request; true when it was taken and the next batch may follow at once. */
  async post(o, batch) {
    const body = batch.map((p) => ({
      lat: Math.round(p.lat * 1e6) / 1e6,
      lon: Math.round(p.lon * 1e6) / 1e6,
      recorded_at: new Date(p.at + this.offsetMs).toISOString(),
    }));
    for (const p of batch) o.flying.add(p);
    try {
      await this.send(o.id, body);
      o.bucket.spend(batch.length, Date.now());
      o.queue = o.queue.filter((p) => !o.flying.has(p));
      o.sentAt = Date.now();
      o.sent += batch.length;
      o.backoff = BACKOFF_START_MS;
      o.error = null;
      this.offline = false;
      return true;
    } catch (error) {
      this.failed(o, batch, error instanceof ApiError ? error : new ApiError(0, "network", String(error)));
      return false;
    } finally {
      o.flying.clear();
    }
  }

  failed(o, batch, error) {
    const now = Date.now();
    o.error = error.message;
    if (error.status === 429) {
      o.bucket.refused(batch.length, error.retryAfter, now);
      o.retryAt = o.bucket.until;
      return;
    }
    if (error.status === 0 || error.status >= 500) {
      // Not taken: keep the points, try again later. A 5xx was counted (the budget is
      // spent before the view runs); a failed connection most likely never arrived.
      if (error.status !== 0) o.bucket.spend(batch.length, now);
      else this.offline = navigator.onLine === false || this.offline;
      o.retryAt = now + (error.retryAfter ? error.retryAfter * 1000 : o.backoff);
      o.backoff = Math.min(o.backoff * 2, BACKOFF_MAX_MS);
      return;
    }
    o.bucket.spend(batch.length, now); // counted, and refused for good: resending fails alike
    const sent = new Set(batch);
    o.queue = o.queue.filter((p) => !sent.has(p));
    o.dropped += batch.length;
    const aboutTheOrder = error.status === 404 || error.status === 403 || Object.keys(error.fields || {}).some((f) => f.endsWith(".order") || f === "order");
    if (aboutTheOrder) {
      o.queue = []; // not (or no longer) this courier's, or not on the road: none would be taken
      o.retryAt = Number.POSITIVE_INFINITY;
    }
  }

  changed() {
    if (this.storageKey && !this.saveTimer) {
      this.saveTimer = setTimeout(() => {
        this.saveTimer = null;
        this.save();
      }, SAVE_EVERY_MS);
    }
    this.onChange(this);
  }

  /** Queues kept from before a reload (this tab only: sessionStorage). */
  load() {
    const saved = new Map();
    if (!this.storageKey) return saved;
    try {
      const raw = JSON.parse(sessionStorage.getItem(this.storageKey) || "{}");
      for (const [id, points] of Object.entries(raw)) saved.set(Number(id), points.map(([lat, lon, at]) => ({ lat, lon, at })));
    } catch {
      /* Nothing usable kept: start empty. */
    }
    return saved;
  }

  save() {
    if (!this.storageKey) return;
    const out = {};
    for (const [id, points] of this.saved) out[id] = points.map((p) => [p.lat, p.lon, p.at]);
    for (const o of this.orders.values()) if (o.queue.length) out[o.id] = o.queue.map((p) => [p.lat, p.lon, p.at]);
    try {
      if (Object.keys(out).length) sessionStorage.setItem(this.storageKey, JSON.stringify(out));
      else sessionStorage.removeItem(this.storageKey);
    } catch {
      /* Storage full or off: the queue stays in memory. */
    }
  }

  /** Forget every kept point (signing out on a shared phone). */
  forget() {
    this.saved.clear();
    for (const o of this.orders.values()) o.queue = [];
    if (this.storageKey) sessionStorage.removeItem(this.storageKey);
  }
}
