/**
 * Signing out in a browser deletes that browser's Web Push subscription first: the next
 * person at this computer must not get the last customer's notifications. Loaded by every
 * signed-in page (base.html); the form posts as before once that is done, or after
 * `WAIT_MS` if the server or the browser's push service is slow (signing out never waits
 * on them longer).
 */
import { currentSubscription, unsubscribe } from "./push.js";

const WAIT_MS = 3000;

const form = document.querySelector("form.signout");
if (form) {
  form.addEventListener("submit", async (event) => {
    if (form.dataset.cleared === "yes") return;
    event.preventDefault();
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    try {
      const timeout = new Promise((resolve) => setTimeout(resolve, WAIT_MS));
      await Promise.race([currentSubscription().then((found) => (found ? unsubscribe() : null)), timeout]);
    } catch {
      // the server keeps it until the push service says it is gone, or the password changes
    }
    form.dataset.cleared = "yes";
    form.submit();
  });
}
