/**
 * The service worker (served at /sw.js, so its scope is the whole site): shows a Web Push
 * message as the lock-screen notification the server declared
 * (tracker/notifications/payload.py: title and body from the status, the order number, the
 * arrival window; never an address, items or names) and opens the order's page when the
 * notification is tapped.
 *
 * The notification carries the payload's `tag` (`order-<id>-<moment>`, the rule notify.js
 * follows too), so a resend of the same moment, or the open tab's own notification of it,
 * replaces the one shown instead of doubling it.
 *
 * A classic script, not a module: it must run in every browser that can receive a push.
 */
/* eslint-env serviceworker */
"use strict";

/** The payload version this worker understands (payload.VERSION). */
const PAYLOAD_VERSION = 1;
/** Shown for a push whose payload this worker cannot read (a browser must show something). */
const FALLBACK = { title: "Ordertrack", body: "Your order has news: open Ordertrack.", tag: "ordertrack-update", url: "/" };

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

/** A path on this site ("/orders/42/"), or "/" for anything else (never another origin). */
function sitePath(url) {
  if (typeof url !== "string" || !url.startsWith("/") || url.startsWith("//")) return "/";
  const parsed = new URL(url, self.location.origin);
  return parsed.origin === self.location.origin ? parsed.pathname + parsed.search : "/";
}

/** The payload as declared, or null when the push carries something else. */
function readPayload(data) {
  let payload;
  try {
    payload = data ? data.json() : null;
  } catch {
    return null;
  }
  if (!payload || payload.v !== PAYLOAD_VERSION) return null;
  if (typeof payload.tag !== "string" || !payload.tag || typeof payload.title !== "string") return null;
  return {
    title: payload.title,
    body: typeof payload.body === "string" ? payload.body : "",
    tag: payload.tag,
    url: sitePath(payload.url),
    orderId: Number.isSafeInteger(payload.order_id) ? payload.order_id : null,
    moment: typeof payload.moment === "string" ? payload.moment : null,
  };
}

/** Show one notification; `renotify`: a replacement alerts again (a later moment, a new slip). */
async function show(note) {
  await self.registration.showNotification(note.title, {
    body: note.body,
    tag: note.tag,
    renotify: true,
    data: { url: note.url, orderId: note.orderId, moment: note.moment },
  });
}

self.addEventListener("push", (event) => {
  event.waitUntil(show(readPayload(event.data) || FALLBACK));
});

/**
 * Tapping the notification opens its order's page: the tab already showing it comes
 * forward; else an open tab of ours goes there; else a new window opens.
 */
async function open(url) {
  const target = new URL(url, self.location.origin).href;
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  const showing = windows.find((client) => client.url === target);
  if (showing) return showing.focus();
  for (const client of windows) {
    try {
      const moved = await client.navigate(target); // only a page this worker controls
      if (moved) return moved.focus().catch(() => moved);
    } catch {
      // not controlled by this worker: try the next, or a new window
    }
  }
  return self.clients.openWindow(target);
}

self.addEventListener("notificationclick", (event) => {
  const url = (event.notification.data && event.notification.data.url) || "/";
  event.notification.close();
  event.waitUntil(open(sitePath(url)));
});
