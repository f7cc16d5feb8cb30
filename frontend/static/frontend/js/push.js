/**
 * This browser's Web Push subscription: made with the server's VAPID key and registered
 * over REST (`/api/v1/notifications/`), or unsubscribed and deleted. The settings page
 * turns it on and off; signing out deletes it first (signout.js), so a shared computer
 * stops getting the last customer's notifications.
 */
import { api } from "./api.js";
import { config } from "./config.js";

/** Whether this browser can receive a push with no page open. */
export const pushSupported =
  typeof window !== "undefined" && "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;

const WORKER = () => config.urls.serviceWorker || "/sw.js";

/** Our worker's registration, registering it if needed (it shows what is pushed). */
export async function registerWorker() {
  await navigator.serviceWorker.register(WORKER(), { scope: "/" });
  return navigator.serviceWorker.ready;
}

/** The browser's subscription with our worker, or null (none, or no worker yet). */
export async function currentSubscription() {
  if (!pushSupported) return null;
  const registration = await navigator.serviceWorker.getRegistration(WORKER());
  return registration ? registration.pushManager.getSubscription() : null;
}

function keyBytes(base64url) {
  const padded = base64url.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (base64url.length % 4)) % 4);
  return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
}

/** A device name for the list of subscriptions: browser and platform, as the browser says. */
function deviceLabel() {
  const data = navigator.userAgentData;
  if (data && data.brands) {
    const brand = data.brands.map((b) => b.brand).find((b) => !/Not.?A.?Brand|Chromium/i.test(b)) || "Chromium";
    return `${brand} on ${data.platform || "this device"}`.slice(0, 200);
  }
  return navigator.userAgent.slice(0, 200);
}

/**
 * Turn push on for this browser: ask permission (call from a click), subscribe with the
 * server's VAPID key, register the subscription. Resolves to the API's record of it;
 * rejects with a message fit to show.
 */
export async function subscribe() {
  if (!pushSupported) throw new Error("This browser cannot receive push notifications.");
  const permission = await Notification.requestPermission();
  if (permission !== "granted") throw new Error("Notifications are blocked for this site in the browser's settings.");
  const [{ public_key: key }, registration] = await Promise.all([api("notifications/vapid-key/"), registerWorker()]);
  let subscription = await registration.pushManager.getSubscription();
  const applicationServerKey = keyBytes(key);
  if (subscription && !sameKey(subscription.options.applicationServerKey, applicationServerKey)) {
    await subscription.unsubscribe(); // made with an older server key: it would never work
    subscription = null;
  }
  if (!subscription) {
    try {
      subscription = await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey });
    } catch (error) {
      throw new Error(`The browser's push service refused the subscription (${error.message || error.name}).`);
    }
  }
  return api("notifications/subscriptions/", { method: "POST", body: { ...subscription.toJSON(), label: deviceLabel() } });
}

function sameKey(buffer, bytes) {
  if (!buffer) return false;
  const have = new Uint8Array(buffer);
  return have.length === bytes.length && have.every((b, i) => b === bytes[i]);
}

/** The API's id of this browser's subscription, if the account has it. */
export async function registeredId(subscription) {
  if (!subscription) return null;
  const mine = await api("notifications/subscriptions/");
  const found = mine.find((item) => item.endpoint === subscription.endpoint);
  return found ? found.id : null;
}

/**
 * Turn push off for this browser: delete its subscription on the server (nothing more is
 * sent to it), then unsubscribe in the browser. Resolves once both are done.
 */
export async function unsubscribe() {
  const subscription = await currentSubscription();
  if (!subscription) return;
  const id = await registeredId(subscription);
  if (id !== null) await api(`notifications/subscriptions/${id}/`, { method: "DELETE" });
  await subscription.unsubscribe();
}
