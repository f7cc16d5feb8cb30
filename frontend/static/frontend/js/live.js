/**
 * A WebSocket that stays connected: automatic reconnect with exponential
 * backoff and jitter, resume with ?since=<last version> (the server answers
 * "resumed" or a fresh "snapshot"), a ping/heartbeat watchdog for silent dead
 * connections, and immediate retry when the browser comes back online.
 *
 * Close codes (see the README, "Live updates"): 4401 sign in again, 4404 no such
 * order, 4400 bad request: final. 4408 too slow, 4503 tracking unavailable and
 * network drops: reconnect.
 */
import { config } from "./config.js";

const FINAL_CODES = { 4401: "unauthenticated", 4404: "not_found", 4400: "bad_request", 4403: "forbidden" };
const BACKOFF_START_MS = 500;
const BACKOFF_MAX_MS = 30000;
const PING_EVERY_MS = 25000;
const SILENCE_LIMIT_MS = 60000; // the server sends a heartbeat every ~20 s

export class LiveSocket {
  /**
   * @param {string} path e.g. "orders/12/" (relative to the ws root)
   * @param {{onMessage: (msg: object) => void, onState?: (state: string, info: object) => void, resume?: boolean, onServerTime?: (ms: number) => void}} handlers
   *   `onServerTime` gets the server's clock (epoch ms) from each heartbeat and pong.
   */
  constructor(path, { onMessage, onState = () => {}, resume = true, onServerTime = null }) {
    this.path = path;
    this.resume = resume; // per-order sockets resume with ?since=; the list socket re-snapshots
    this.onMessage = onMessage;
    this.onState = onState;
    this.onServerTime = onServerTime;
    this.version = null; // the last version the page has: sent as ?since= on reconnect
    this.attempt = 0;
    this.socket = null;
    this.stopped = false;
    this.retryTimer = null;
    this.pingTimer = null;
    this.lastMessageAt = 0;
    this.onlineListener = () => this.retryNow();
  }

  /** The socket URL (ws: or wss: like the page), with ?since= when resuming. */
  url() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const since = this.resume && this.version !== null && this.version !== undefined ? `?since=${encodeURIComponent(this.version)}` : "";
    return `${scheme}//${location.host}${config.wsRoot}${this.path}${since}`;
  }

  start() {
    this.stopped = false;
    window.addEventListener("online", this.onlineListener);
    this.connect();
    return this;
  }

  stop() {
    this.stopped = true;
    window.removeEventListener("online", this.onlineListener);
    clearTimeout(this.retryTimer);
    clearInterval(this.pingTimer);
    if (this.socket) this.socket.close(1000);
  }

  /** Skip the remaining backoff (the "Reconnect now" button, or the browser is back online). */
  retryNow() {
    if (this.stopped || (this.socket && this.socket.readyState <= WebSocket.OPEN)) return;
    clearTimeout(this.retryTimer);
    this.connect();
  }

  connect() {
    this.onState(this.attempt === 0 ? "connecting" : "reconnecting", { attempt: this.attempt });
    let socket;
    try {
      socket = new WebSocket(this.url());
    } catch {
      this.scheduleRetry();
      return;
    }
    this.socket = socket;
    let finalCode = null;
    socket.addEventListener("open", () => {
      this.lastMessageAt = Date.now();
      clearInterval(this.pingTimer);
      this.pingTimer = setInterval(() => this.keepAlive(), PING_EVERY_MS);
    });
    socket.addEventListener("message", (event) => {
      this.lastMessageAt = Date.now();
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      if (message.type === "error") {
        if (FINAL_CODES[message.code]) finalCode = message.code;
        return;
      }
      if (message.type === "snapshot" || message.type === "resumed") {
        this.attempt = 0; // a healthy connection: the next drop starts the backoff afresh
        this.onState("live", {});
      }
      if (this.resume && typeof message.version === "number") this.setVersion(message.version);
      if (message.type === "heartbeat" || message.type === "pong") {
        if (this.onServerTime && typeof message.server_time === "number") this.onServerTime(message.server_time * 1000);
        return;
      }
      this.onMessage(message);
    });
    socket.addEventListener("close", (event) => {
      clearInterval(this.pingTimer);
      if (this.socket !== socket || this.stopped) return;
      const code = finalCode || event.code;
      if (FINAL_CODES[code]) {
        this.onState("failed", { code, reason: FINAL_CODES[code] });
        return;
      }
      this.scheduleRetry();
    });
  }

  /** Ping, and treat a long silence as a dead connection (proxies drop sockets silently). */
  keepAlive() {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) return;
    if (Date.now() - this.lastMessageAt > SILENCE_LIMIT_MS) {
      socket.close(4000);
      return;
    }
    socket.send(JSON.stringify({ type: "ping" }));
  }

  scheduleRetry() {
    if (this.stopped) return;
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_START_MS * 2 ** this.attempt);
    const delay = Math.round(base / 2 + Math.random() * (base / 2)); // "equal jitter"
    this.attempt += 1;
    this.onState("waiting", { attempt: this.attempt, retryAt: Date.now() + delay });
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.connect(), delay);
  }

  /** Remember the newest version applied (so a reconnect resumes after it). */
  setVersion(version) {
    if (version !== null && version !== undefined && (this.version === null || version > this.version)) this.version = version;
  }
}
