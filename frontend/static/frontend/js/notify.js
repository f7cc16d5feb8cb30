/**
 * Status changes while the page is in the background: a browser notification,
 * only after the customer said yes (the "Notify me" button asks; nothing asks on
 * page load). The tab title carries the status too, so it shows in the tab strip.
 */
import { h, replace, toast } from "./dom.js";
import { label } from "./status.js";

const supported = typeof window !== "undefined" && "Notification" in window;

/** "In the oven · Order #12 · Ordertrack" */
export function titleForStatus(orderId, status) {
  return `${label(status)} · Order #${orderId} · Ordertrack`;
}

export function setTitleStatus(orderId, status) {
  document.title = titleForStatus(orderId, status);
}

/** Notify about an order's new status, if allowed and nobody is looking at the page. */
export function notifyStatus(orderId, status, { restaurant = null, url = null } = {}) {
  if (!supported || Notification.permission !== "granted" || !document.hidden) return null;
  try {
    const note = new Notification(`Order #${orderId}: ${label(status)}`, {
      body: restaurant ? `${restaurant} · tap to follow your order` : "Tap to follow your order",
      tag: `order-${orderId}`, // one notification per order: a newer status replaces it
      renotify: true,
    });
    note.onclick = () => {
      window.focus();
      if (url && location.pathname !== url) location.assign(url);
      note.close();
    };
    return note;
  } catch {
    return null; // e.g. a browser that only notifies from a service worker
  }
}

/**
 * The "Notify me" control in `slot`: a button while permission is undecided, a note
 * once granted or blocked. Clicking asks the browser (a user gesture, as required).
 */
export function notificationControl(slot) {
  if (!slot) return;
  const draw = () => {
    if (!supported) {
      replace(slot);
      return;
    }
    const permission = Notification.permission;
    if (permission === "granted") {
      replace(slot, h("span", { class: "muted notify-state", id: "notify-state" }, "Notifications on"));
    } else if (permission === "denied") {
      replace(slot, h("span", { class: "muted notify-state", id: "notify-state" }, "Notifications blocked in the browser"));
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
      );
    }
  };
  draw();
}
