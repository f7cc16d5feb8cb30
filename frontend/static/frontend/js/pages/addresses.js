/**
 * Delivery addresses: list, add, edit, delete, choose the default, with a map pin.
 *
 * Everything goes through the API (me/addresses/), so the browser is validated
 * exactly like any other client: the server's per-field messages show under the
 * fields. The map is the offline schematic; a click (or a drag of the pin) sets
 * the coordinates, and typed coordinates move the pin.
 */
import { api } from "../api.js";
import { announce, emptyState, errorState, h, loadingState, replace, toast } from "../dom.js";
import { CITY_CENTER, L, createMap, pinIcon } from "../map.js";

const FIELDS = ["label", "line1", "city", "lat", "lon"];
const els = {
  list: document.getElementById("address-list"),
  form: document.getElementById("address-form"),
  formTitle: document.getElementById("form-title"),
  formError: document.getElementById("form-error"),
  save: document.getElementById("address-save"),
  cancel: document.getElementById("address-cancel"),
  addNew: document.getElementById("address-new"),
  isDefault: document.getElementById("a-default"),
  map: document.getElementById("pick-map"),
  input: Object.fromEntries(FIELDS.map((f) => [f, document.getElementById(`a-${f}`)])),
  error: Object.fromEntries(FIELDS.map((f) => [f, document.getElementById(`err-${f}`)])),
};

let addresses = [];
let editing = null; // the id being edited, or null when adding
let map = null;
let pin = null;

// ------------------------------------------------------------------ list

function render() {
  if (!addresses.length) {
    replace(els.list, h("li", {}, emptyState("No saved addresses", "Add one to order food.")));
    return;
  }
  replace(
    els.list,
    addresses.map((a) =>
      h(
        "li",
        { class: "address-item", dataset: { addressId: a.id, default: a.is_default ? "1" : "" } },
        h("div", { class: "address-title" }, a.label || "Address", a.is_default ? h("span", { class: "badge badge-done" }, "Default") : null),
        h("p", { class: "muted" }, `${a.line1}${a.city ? `, ${a.city}` : ""}`),
        h(
          "div",
          { class: "address-actions" },
          h("button", { type: "button", class: "btn btn-secondary btn-small", "aria-label": `Edit ${a.label || "address"}: ${a.line1}`, onclick: () => edit(a) }, "Edit"),
          a.is_default ? null : h("button", { type: "button", class: "btn btn-ghost btn-small", "aria-label": `Make ${a.label || "address"}: ${a.line1} the default`, onclick: () => makeDefault(a) }, "Make default"),
          h("button", { type: "button", class: "btn btn-ghost btn-small", "aria-label": `Delete ${a.label || "address"}: ${a.line1}`, onclick: (e) => remove(a, e.currentTarget) }, "Delete"),
        ),
      ),
    ),
  );
}

async function reload() {
  addresses = await api("me/addresses/");
  render();
}

// ------------------------------------------------------------------ form

function clearErrors() {
  els.formError.hidden = true;
  for (const f of FIELDS) {
    els.error[f].hidden = true;
    els.error[f].textContent = "";
    els.input[f].removeAttribute("aria-invalid");
  }
}

function showErrors(error) {
  const fields = error.fields || {};
  let first = null;
  for (const f of FIELDS) {
    if (fields[f]) {
      els.error[f].textContent = fields[f].join(" ");
      els.error[f].hidden = false;
      els.input[f].setAttribute("aria-invalid", "true");
      first = first || els.input[f];
    }
  }
  const other = Object.keys(fields).filter((k) => !FIELDS.includes(k));
  if (!first || other.length) {
    els.formError.textContent = error.message;
    els.formError.hidden = false;
  }
  (first || els.formError).focus?.();
  announce(`The address was not saved: ${error.message}`);
}

function fill(a) {
  els.input.label.value = a ? a.label : "";
  els.input.line1.value = a ? a.line1 : "";
  els.input.city.value = a ? a.city : "Bengaluru";
  els.input.lat.value = a ? String(a.lat) : "";
  els.input.lon.value = a ? String(a.lon) : "";
  els.isDefault.checked = a ? a.is_default : !addresses.length;
  placePin(a ? [a.lat, a.lon] : null);
}

function edit(a) {
  editing = a.id;
  clearErrors();
  fill(a);
  els.formTitle.textContent = `Edit “${a.label || a.line1}”`;
  els.save.textContent = "Save changes";
  els.cancel.hidden = false;
  els.input.line1.focus();
}

function startNew() {
  editing = null;
  clearErrors();
  fill(null);
  els.formTitle.textContent = "Add an address";
  els.save.textContent = "Save address";
  els.cancel.hidden = true;
  els.input.label.focus();
}

function number(text) {
  const trimmed = text.trim();
  return trimmed === "" || Number.isNaN(Number(trimmed)) ? trimmed : Number(trimmed);
}

async function submit(event) {
  event.preventDefault();
  clearErrors();
  const body = {
    label: els.input.label.value.trim() || "Home",
    line1: els.input.line1.value.trim(),
    city: els.input.city.value.trim(),
    lat: number(els.input.lat.value),
    lon: number(els.input.lon.value),
    is_default: els.isDefault.checked,
  };
  els.save.disabled = true;
  try {
    const saved = editing === null
      ? await api("me/addresses/", { method: "POST", body })
      : await api(`me/addresses/${editing}/`, { method: "PATCH", body });
    await reload();
    toast(editing === null ? `Saved “${saved.label}”.` : `Updated “${saved.label}”.`, "success");
    startNew();
  } catch (error) {
    showErrors(error);
  } finally {
    els.save.disabled = false;
  }
}

async function makeDefault(a) {
  try {
    await api(`me/addresses/${a.id}/`, { method: "PATCH", body: { is_default: true } });
    await reload();
    announce(`${a.label || a.line1} is now your default address.`);
  } catch (error) {
    toast(error.message, "error");
  }
}

async function remove(a, button) {
  if (button.dataset.armed !== "1") {
    button.dataset.armed = "1";
    button.textContent = "Confirm delete";
    button.setAttribute("aria-label", `Confirm delete: ${a.label || "address"}, ${a.line1}`);
    announce("Press again to delete this address.");
    button.classList.add("btn-danger-outline");
    return;
  }
  button.disabled = true;
  try {
    await api(`me/addresses/${a.id}/`, { method: "DELETE" });
    if (editing === a.id) startNew();
    await reload();
    announce(`Deleted ${a.label || a.line1}.`);
  } catch (error) {
    button.disabled = false;
    toast(error.message, "error");
  }
}

// ------------------------------------------------------------------ map pin

function placePin(latlng) {
  if (!map) return;
  if (!latlng) {
    if (pin) pin.remove();
    pin = null;
    map.setView(CITY_CENTER, 12);
    return;
  }
  if (!pin) {
    pin = L.marker(latlng, { icon: pinIcon("home"), draggable: true, title: "Delivery pin (drag to move)", alt: "Delivery pin" }).addTo(map);
    pin.on("dragend", () => setCoords(pin.getLatLng(), false));
  } else {
    pin.setLatLng(latlng);
  }
  if (!map.getBounds().pad(-0.1).contains(latlng)) map.panTo(latlng);
}

function setCoords(latlng, move = true) {
  els.input.lat.value = latlng.lat.toFixed(6);
  els.input.lon.value = latlng.lng.toFixed(6);
  if (move) placePin([latlng.lat, latlng.lng]);
}

function coordsTyped() {
  const lat = Number(els.input.lat.value);
  const lon = Number(els.input.lon.value);
  if (els.input.lat.value.trim() && els.input.lon.value.trim() && Math.abs(lat) <= 90 && Math.abs(lon) <= 180) placePin([lat, lon]);
}

// ------------------------------------------------------------------ start

async function start() {
  replace(els.list, h("li", {}, loadingState("Loading your addresses…")));
  map = createMap(els.map, { label: "Map: click to put the delivery pin" });
  map.on("click", (e) => setCoords(e.latlng));
  els.form.addEventListener("submit", submit);
  els.cancel.addEventListener("click", startNew);
  els.addNew.addEventListener("click", startNew);
  els.input.lat.addEventListener("change", coordsTyped);
  els.input.lon.addEventListener("change", coordsTyped);
  try {
    await reload();
  } catch (error) {
    replace(els.list, h("li", {}, errorState(error, start)));
    return;
  }
  fill(null);
}

start();
