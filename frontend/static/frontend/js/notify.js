/**
 * Status changes while the page is in the background: a browser notification,
 * only after the customer said yes (the "Notify me" button asks; nothing asks on
 * page load). The tab title carries the status too, so it shows in the tab strip.
 *
 * Only the moments the server pushes are announced, and of those only the ones the
 * customer chose on the settings page (`chosen`), each with the server's tag
 * (`config.notifications`, from tracker/notifications/moments.py): the open tab's
 * notification and the pushed one of the same moment replace each other, never double.
 * Where the browser has our service worker, the notification is shown through it (the
 * only way some browsers show one at all), and tapping it opens the order's page there.
 */
import { config, orderUrl } from "./config.js";
import { h, replace, toast } from "./dom.js";
import { label } from "./status.js";

const supported = typeof window !== "undefined" && "Notification" in window;
const rule = config.notifications || { tagFormat: "order-{order_id}-{moment}", momentOfStatus: {}, moments: {}, wording: {}, chosen: null };

/** "In the oven · Order #12 · Ordertrack" */
export function titleForStatus(orderId, status) {
  return `${label(status)} · Order #${orderId} · Ordertrack`;
}

export function setTitleStatus(orderId, status) {
  document.title = titleForStatus(orderId, status);
}

/** The moment a status is ("confirmed", …), or null for a kitchen step nobody is told of. */
export function momentOf(status) {
  return rule.momentOfStatus[status] || null;
}

/** The notification tag of an order's moment: the server's rule (moments.tag). */
export function tagFor(orderId, moment) {
  return rule.tagFormat.replace("{order_id}", String(orderId)).replace("{moment}", moment);
}

/**
 * The title and body of an order's moment: the server's one wording (moments.WORDING,
 * as the pushed payload says it). A body that tells the arrival window comes empty (the
 * tab does not know the window told; the push that carries it replaces this one).
 */
export function wordingFor(orderId, moment) {
  const words = rule.wording[moment];
  if (!words) return null;
  return { title: words.title.replace("{order_id}", String(orderId)), body: words.body };
}

/** Our service worker's registration, if this browser has an active one (null: show directly). */
async function workerRegistration() {
  if (!("serviceWorker" in navigator)) return null;
  try {
    const registration = await navigator.serviceWorker.getRegistration(config.urls.serviceWorker || "/sw.js");
    return registration && registration.active ? registration : null;
  } catch {
    return null;
  }
}

/**
 * Notify about an order's new status, if it is a moment, notifications are allowed and
 * nobody is looking at the page. Resolves to whether one was shown.
 */
export async function notifyStatus(orderId, status) {
  const moment = momentOf(status);
  if (moment && rule.chosen && !rule.chosen.includes(moment)) return false; // turned off in the settings
  const words = moment ? wordingFor(orderId, moment) : null;
  if (!words || !supported || Notification.permission !== "granted" || !document.hidden) return false;
  const url = orderUrl(orderId);
  // No names, address or items: what a lock screen may show (as the pushed payload).
  const options = { body: words.body, tag: tagFor(orderId, moment), renotify: true, data: { url } };
  const title = words.title;
  const registration = await workerRegistration();
  try {
    if (registration) {
      await registration.showNotification(title, options);
      return true;
    }
    const note = new Notification(title, options);
    note.onclick = () => {
      window.focus();
      if (location.pathname !== url) location.assign(url);
      note.close();
    };
    return true;
  } catch {
    return false; // e.g. a browser that only notifies from a service worker it lacks
  }
}

/**
 * The "Notify me" control in `slot`: a button while permission is undecided, a note
 * once granted or blocked, and the way to the settings page (push with the page closed,
 * email). Clicking asks the browser (a user gesture, as required).
 */
export function notificationControl(slot) {
  if (!slot) return;
  const settings = config.urls.notificationSettings
    ? h("a", { class: "notify-settings", href: config.urls.notificationSettings }, "Notification settings")
    : null;
  const draw = () => {
    if (!supported) {
      replace(slot, settings);
      return;
    }
    const permission = Notification.permission;
    if (permission === "granted") {
      replace(slot, h("span", { class: "muted notify-state", id: "notify-state" }, "Notifications on"), settings);
    } else if (permission === "denied") {
      replace(slot, h("span", { class: "muted notify-state", id: "notify-state" }, "Notifications blocked in the browser"), settings);
    } else {
      replace(
        slot,
        h(
          "button",
          {
            type: "button",
            class: "btn btn-secondary btn-small",
            id: "notify-button",
            title: "Get a notification when your order changes while this page is in the background",
            onclick: async () => {
              const answer = await Notification.requestPermission();
              if (answer === "granted") toast("We will notify you when your order changes.", "success");
              draw();
            },
          },
          "Notify me",
        ),
        settings,
      );
    }
  };
  draw();
}
