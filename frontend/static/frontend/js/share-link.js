/**
 * "Share tracking link" on the order page, for the order's customer: make a link anyone
 * can open without signing in to follow the delivery, copy it (or hand it to the phone's
 * share sheet), stop sharing. The button discloses a panel (aria-expanded/aria-controls,
 * Escape closes it and returns focus); every outcome is announced in the page's live
 * region. A link's address is shown once, when it is made (the server keeps only a hash
 * of its token): after a reload the panel says until when sharing is on, and a new link
 * can be made to copy again.
 *
 * Whether the viewer may share is the server's answer: the control appears only when
 * GET orders/{id}/share/ answers (its customer); anyone else gets 403/404 and no control.
 */
import { api } from "./api.js";
import { config } from "./config.js";
import { announce, h, replace, toast } from "./dom.js";
import { when } from "./format.js";

/** When the last of `links` stops working (ISO), or null. */
function lastEnd(links) {
  const ends = links.map((link) => link.expires_at).sort();
  return ends.length ? ends[ends.length - 1] : null;
}

/**
 * Put the control in `slot` (its button) and `panel` (an empty, hidden element with an id).
 * `canMake`: whether a new link is worth offering (the order is still on its way); a
 * finished order's control only stops links still working. Resolves once the control is
 * drawn, or without one when the viewer may not share.
 */
export async function shareControl(slot, panel, orderId, { canMake = true } = {}) {
  let links;
  try {
    links = await api(`orders/${orderId}/share/`);
  } catch {
    return; // not the viewer's order to share, or it cannot be reached: no control
  }
  if (!canMake && !links.length) return;
  const rules = config.share || { graceMinutes: 30, maxAgeHours: 24 };
  const state = { links, created: null };
  const button = h(
    "button",
    { type: "button", class: "btn btn-secondary btn-small", id: "share-button", "aria-expanded": "false", "aria-controls": panel.id, onclick: toggle },
    "Share tracking link",
  );
  replace(slot, button);
  panel.addEventListener("keydown", (event) => {
    if (event.key === "Escape") close();
  });

  function toggle() {
    if (!panel.hidden) {
      close();
      return;
    }
    panel.hidden = false;
    button.setAttribute("aria-expanded", "true");
    draw();
    panel.querySelector("button, input")?.focus();
  }

  function close() {
    panel.hidden = true;
    button.setAttribute("aria-expanded", "false");
    button.focus();
  }

  function draw() {
    const sharing = state.links.length > 0;
    const parts = [
      h("h2", { id: "share-title" }, "Share tracking"),
      h(
        "p",
        { class: "muted" },
        "Anyone with the link can follow this delivery without signing in: its progress, the courier on the map while on the way, and the arrival time. " +
          `They do not see your name, your address or what you ordered. A link stops working ${rules.graceMinutes} minutes after the delivery, and after ${rules.maxAgeHours} hours at most.`,
      ),
    ];
    if (sharing) {
      const count = state.links.length === 1 ? "a link works" : `${state.links.length} links work`;
      const again = state.created ? "" : " A link's address is shown only when it is made: make a new one to copy it again.";
      parts.push(h("p", { id: "share-until" }, `Sharing is on: ${count} until ${when(lastEnd(state.links))}.${again}`));
    }
    if (state.created) {
      parts.push(
        h(
          "div",
          { class: "field" },
          h("label", { for: "share-url" }, "Tracking link"),
          h(
            "div",
            { class: "share-row" },
            h("input", { id: "share-url", type: "text", readonly: true, value: state.created.url, spellcheck: "false", "aria-describedby": "share-until" }),
            h("button", { type: "button", class: "btn btn-primary btn-small", id: "share-copy", onclick: copy }, "Copy link"),
            navigator.share ? h("button", { type: "button", class: "btn btn-secondary btn-small", onclick: shareSheet }, "Send…") : null,
          ),
        ),
      );
    }
    parts.push(
      h(
        "div",
        { class: "share-actions" },
        canMake ? h("button", { type: "button", class: "btn btn-secondary btn-small", id: "share-create", onclick: create }, sharing ? "Make a new link" : "Make a link") : null,
        sharing ? h("button", { type: "button", class: "btn btn-danger-outline btn-small", id: "share-stop", onclick: stop }, "Stop sharing") : null,
      ),
    );
    replace(panel, ...parts);
  }

  async function create(event) {
    const trigger = event.currentTarget;
    trigger.disabled = true;
    try {
      const link = await api(`orders/${orderId}/share/`, { method: "POST" });
      state.created = link;
      state.links = [link, ...state.links];
      draw();
      const input = document.getElementById("share-url");
      input.focus();
      input.select();
      announce(`Tracking link made. It works until ${when(link.expires_at)}. Use Copy link to copy it.`);
    } catch (error) {
      trigger.disabled = false;
      toast(error.message, "error");
    }
  }

  async function copy() {
    const input = document.getElementById("share-url");
    try {
      await navigator.clipboard.writeText(state.created.url);
      announce("Link copied. Paste it into a message to share the delivery.");
    } catch {
      input.focus();
      input.select();
      announce("The link could not be copied for you: it is selected, press Control+C (Command+C on a Mac) to copy it.");
    }
  }

  async function shareSheet() {
    try {
      await navigator.share({ title: "Follow my delivery", url: state.created.url });
    } catch {
      /* the share sheet was closed: nothing to say */
    }
  }

  async function stop(event) {
    const trigger = event.currentTarget;
    trigger.disabled = true;
    try {
      await api(`orders/${orderId}/share/`, { method: "DELETE" });
      state.links = [];
      state.created = null;
      draw();
      (document.getElementById("share-create") || button).focus();
      announce("Sharing stopped. The links no longer work, and pages open on them stop updating.");
    } catch (error) {
      trigger.disabled = false;
      toast(error.message, "error");
    }
  }
}
