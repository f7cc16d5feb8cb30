/**
 * Tiny DOM helpers: an element builder, state panels (loading / empty / error)
 * and the ARIA live region that announces changes to screen readers.
 */

/**
 * Build an element: h("a", {href: "/", class: "x", onclick: fn}, "text", child).
 * Attributes starting with "on" become listeners; `dataset` sets data-*; `style` is an
 * object of CSS properties, set through the element's style (a style attribute is inline
 * style, which the Content-Security-Policy refuses); null/false skip.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "dataset") {
      Object.assign(el.dataset, value);
    } else if (key === "style") {
      Object.assign(el.style, value);
    } else if (key === "class") {
      el.className = value;
    } else if (key === "text") {
      el.textContent = value;
    } else if (value === true) {
      el.setAttribute(key, "");
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

/** Same as h() for SVG elements. */
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") el.textContent = value;
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace an element's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A loading placeholder (announced politely, with a spinner). */
export function loadingState(text = "Loading…") {
  return h("div", { class: "state state-loading", role: "status" }, h("span", { class: "spinner", "aria-hidden": "true" }), text);
}

/** An empty-state panel: a title, an explanation and an optional call to action. */
export function emptyState(title, text = "", action = null) {
  return h("div", { class: "state state-empty" }, h("p", { class: "state-title" }, title), text ? h("p", {}, text) : null, action);
}

/** An error panel (role=alert) with an optional "Try again" button. */
export function errorState(error, retry = null) {
  const message = error && error.message ? error.message : String(error);
  return h(
    "div",
    { class: "state state-error", role: "alert" },
    h("p", { class: "state-title" }, "Something went wrong"),
    h("p", {}, message),
    retry ? h("button", { type: "button", class: "btn btn-secondary", onclick: retry }, "Try again") : null,
  );
}

let announceTimer = null;

/** Tell screen-reader users about a change (the page's aria-live region). */
export function announce(text) {
  const region = document.getElementById("announcer");
  if (!region) return;
  clearTimeout(announceTimer);
  region.textContent = "";
  // A fresh text node after a tick is announced even when the text repeats.
  announceTimer = setTimeout(() => {
    region.textContent = text;
  }, 50);
}

/** Show a short-lived toast message (also announced). */
export function toast(text, kind = "info") {
  let host = document.getElementById("toasts");
  if (!host) {
    host = h("div", { id: "toasts", class: "toasts" });
    document.body.append(host);
  }
  const item = h("div", { class: `toast toast-${kind}` }, text);
  host.append(item);
  announce(text);
  setTimeout(() => item.remove(), 5000);
}
