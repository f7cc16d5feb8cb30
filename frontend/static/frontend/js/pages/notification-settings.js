/**
 * Notification settings (/settings/notifications/): push on this device (ask permission,
 * subscribe with the server's VAPID key, register over REST; or unsubscribe and delete),
 * the devices that get push (each can be removed), and the preferences: push and email on
 * or off (email off until turned on), which moments. Everything through
 * /api/v1/notifications/; the moments and their names come from the page's configuration
 * (the server's rule, tracker/notifications/moments.py).
 */
import { api } from "../api.js";
import { config } from "../config.js";
import { h, replace, toast } from "../dom.js";
import { currentSubscription, pushSupported, subscribe, unsubscribe } from "../push.js";

const els = {
  state: document.getElementById("device-state"),
  on: document.getElementById("push-on"),
  off: document.getElementById("push-off"),
  devices: document.getElementById("device-list"),
  form: document.getElementById("prefs-form"),
  error: document.getElementById("prefs-error"),
  push: document.getElementById("pref-push"),
  email: document.getElementById("pref-email"),
  moments: document.getElementById("moment-list"),
  save: document.getElementById("prefs-save"),
  saved: document.getElementById("prefs-state"),
};
const MOMENTS = Object.entries((config.notifications && config.notifications.moments) || {});

// ------------------------------------------------------------------ this device

let subscribedEndpoint = null;

async function drawDevice() {
  els.on.hidden = els.off.hidden = true;
  const subscription = pushSupported ? await currentSubscription().catch(() => null) : null;
  subscribedEndpoint = subscription ? subscription.endpoint : null;
  const devices = await drawDevices(); // the others can be removed from any browser
  if (!pushSupported) {
    els.state.textContent = "This browser cannot receive push notifications. Email still works.";
  } else if (Notification.permission === "denied") {
    els.state.textContent = "Notifications are blocked for this site in the browser's settings.";
  } else {
    const registered = subscription !== null && devices.some((d) => d.endpoint === subscription.endpoint);
    els.state.textContent = registered ? "This device gets push notifications." : "This device does not get push notifications.";
    els.on.hidden = registered;
    els.off.hidden = !registered;
  }
}

async function drawDevices() {
  let devices;
  try {
    devices = await api("notifications/subscriptions/");
  } catch (error) {
    replace(els.devices, h("li", { class: "muted" }, error.message));
    return [];
  }
  if (!devices.length) {
    replace(els.devices, h("li", { class: "muted" }, "None yet."));
    return devices;
  }
  replace(
    els.devices,
    devices.map((device) => {
      const name = device.label || "A browser";
      const here = device.endpoint === subscribedEndpoint ? " (this device)" : "";
      return h(
        "li",
        { class: "device-item" },
        h("span", {}, name + here),
        h(
          "button",
          { type: "button", class: "btn btn-ghost btn-small", "aria-label": `Remove ${name}${here}`, onclick: () => removeDevice(device) },
          "Remove",
        ),
      );
    }),
  );
  return devices;
}

async function removeDevice(device) {
  try {
    if (device.endpoint === subscribedEndpoint) await unsubscribe();
    else await api(`notifications/subscriptions/${device.id}/`, { method: "DELETE" });
    toast("That device no longer gets push notifications.", "success");
  } catch (error) {
    toast(error.message, "error");
  }
  await drawDevice();
}

async function busy(button, work) {
  button.disabled = true;
  try {
    await work();
  } catch (error) {
    els.state.textContent = error.message;
    toast(error.message, "error");
    button.disabled = false;
    return;
  }
  button.disabled = false;
  await drawDevice();
}

els.on.addEventListener("click", () =>
  busy(els.on, async () => {
    await subscribe();
    if (!els.push.checked) await savePreferences({ push_enabled: true }); // the device on, the channel too
    toast("This device will get push notifications.", "success");
  }),
);
els.off.addEventListener("click", () =>
  busy(els.off, async () => {
    await unsubscribe();
    toast("This device no longer gets push notifications.", "success");
  }),
);

// ------------------------------------------------------------------ preferences

function drawMoments() {
  replace(
    els.moments,
    MOMENTS.map(([value, name]) =>
      h("label", { class: "check" }, h("input", { type: "checkbox", name: "moments", value, id: `moment-${value}` }), ` ${name}`),
    ),
  );
}

function showPreferences(prefs) {
  els.push.checked = prefs.push_enabled;
  els.email.checked = prefs.email_enabled;
  for (const box of els.moments.querySelectorAll("input[name=moments]")) box.checked = prefs.moments.includes(box.value);
}

async function savePreferences(changes) {
  const prefs = await api("notifications/preferences/", { method: "PATCH", body: changes });
  showPreferences(prefs);
  return prefs;
}

els.form.addEventListener("submit", async (event) => {
  event.preventDefault();
  els.error.hidden = true;
  els.saved.textContent = "";
  els.save.disabled = true;
  const moments = [...els.moments.querySelectorAll("input[name=moments]:checked")].map((box) => box.value);
  try {
    await savePreferences({ push_enabled: els.push.checked, email_enabled: els.email.checked, moments });
    els.saved.textContent = "Saved.";
  } catch (error) {
    els.error.textContent = error.message;
    els.error.hidden = false;
  } finally {
    els.save.disabled = false;
  }
});

async function start() {
  drawMoments();
  try {
    showPreferences(await api("notifications/preferences/"));
  } catch (error) {
    els.error.textContent = error.message;
    els.error.hidden = false;
  }
  await drawDevice();
}

start();
