/**
 * The connection indicator: a "Live" pill in the page and, when the socket is
 * down, a banner with the reconnect countdown and a "Reconnect now" button.
 * Both are announced through role=status.
 */
import { announce, h, replace } from "./dom.js";

const FAILED_TEXT = {
  unauthenticated: "Your session has ended. Sign in again to see live updates.",
  not_found: "This order cannot be followed live (not found).",
  bad_request: "Live updates could not start (bad request).",
  forbidden: "Live updates were refused by the server.",
};

/**
 * Bind an indicator to a LiveSocket. Returns the `onState` callback to give it.
 * @param {() => import("./live.js").LiveSocket} getSocket
 * @param {Record<string, string>} [failedText] the page's own words for a final close, by reason
 */
export function connectionIndicator(getSocket, failedText = {}) {
  let countdown = null;
  let wasLive = false;
  let everLive = false;

  function setPill(state, text) {
    const pill = document.getElementById("live-pill");
    if (!pill) return;
    pill.dataset.state = state;
    replace(pill, h("span", { class: "dot", "aria-hidden": "true" }), text);
  }

  function showBanner(message, withButton) {
    const banner = document.getElementById("connection");
    if (!banner) return;
    banner.hidden = false;
    replace(
      banner,
      h("span", { class: "connection-text" }, message),
      withButton ? h("button", { type: "button", class: "btn btn-small", onclick: () => getSocket().retryNow() }, "Reconnect now") : null,
    );
  }

  return function onState(state, info) {
    clearInterval(countdown);
    if (state === "live") {
      setPill("live", "Live");
      const banner = document.getElementById("connection");
      if (banner) banner.hidden = true;
      if (!wasLive && everLive) announce("Reconnected. Live updates resumed.");
      wasLive = true;
      everLive = true;
      return;
    }
    if (state === "connecting") {
      setPill("connecting", "Connecting…");
      return;
    }
    if (state === "reconnecting") {
      setPill("connecting", "Reconnecting…");
      showBanner("Connection lost. Reconnecting…", false);
      return;
    }
    if (state === "waiting") {
      if (wasLive) announce("Connection lost. Reconnecting automatically.");
      wasLive = false;
      setPill("offline", "Offline");
      const tick = () => {
        const seconds = Math.max(0, Math.ceil((info.retryAt - Date.now()) / 1000));
        showBanner(`Connection lost. Reconnecting in ${seconds} s…`, true);
      };
      tick();
      countdown = setInterval(tick, 1000);
      return;
    }
    if (state === "failed") {
      wasLive = false;
      setPill("offline", "Not live");
      showBanner(failedText[info.reason] || FAILED_TEXT[info.reason] || "Live updates stopped.", false);
    }
  };
}
