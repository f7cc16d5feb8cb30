/**
 * The REST API client: same-origin session cookie, CSRF header on writes,
 * and the API's error shape {"error": {status, code, message, fields?}} turned
 * into an ApiError with a message fit to show.
 */
import { config } from "./config.js";

export class ApiError extends Error {
  /**
   * @param {number} status HTTP status (0: the server could not be reached)
   * @param {string} code machine-readable code
   * @param {string} message human-readable message
   * @param {Record<string, string[]>} [fields] per-field validation errors
   * `retryAfter` (seconds) is set when the answer had a Retry-After header.
   */
  constructor(status, code, message, fields = undefined) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.fields = fields;
  }
}

/** The value of a cookie (the CSRF token Django sets for the page). */
export function cookie(name) {
  for (const part of document.cookie.split(";")) {
    const [key, ...rest] = part.trim().split("=");
    if (key === name) return decodeURIComponent(rest.join("="));
  }
  return "";
}

const MESSAGES = {
  0: "Cannot reach the server. Check your connection and try again.",
  404: "Not found.",
  429: "Too many requests. Please wait a moment and try again.",
  503: "Live tracking is temporarily unavailable. Please try again shortly.",
};

/**
 * Call the API. `path` is relative to /api/v1/ unless it starts with "/" or "http".
 * Resolves to the parsed JSON (null for 204); rejects with ApiError.
 */
export async function api(path, { method = "GET", body = undefined, headers = {}, signal = undefined } = {}) {
  const url = /^(\/|https?:)/.test(path) ? path : config.apiRoot + path;
  const init = {
    method,
    signal,
    credentials: "same-origin",
    headers: { Accept: "application/json", ...headers },
  };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  if (method !== "GET" && method !== "HEAD") init.headers["X-CSRFToken"] = cookie("csrftoken");
  let response;
  try {
    response = await fetch(url, init);
  } catch (err) {
    if (err && err.name === "AbortError") throw err;
    throw new ApiError(0, "network", MESSAGES[0]);
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (response.ok) return data;
  if (response.status === 401 && config.urls.login) {
    // The session ended (signed out elsewhere, expired): sign in again, then come back.
    window.location.assign(`${config.urls.login}?next=${encodeURIComponent(location.pathname + location.search)}`);
  }
  const error = (data && data.error) || {};
  const failure = new ApiError(
    response.status,
    error.code || `http_${response.status}`,
    MESSAGES[response.status] && !error.message ? MESSAGES[response.status] : error.message || MESSAGES[response.status] || `Request failed (${response.status}).`,
    error.fields,
  );
  // A 429 (and a 503) says when to come back: Retry-After, in seconds (what the API sends).
  const wait = Number.parseFloat(response.headers.get("Retry-After") || "");
  if (Number.isFinite(wait) && wait >= 0) failure.retryAfter = wait;
  throw failure;
}
