/** Small pieces of UI shared by the pages: status badges, progress bars, change chips, tables, the order timeline and a page's facts list. */
import { h } from "./dom.js";
import { arrival, change, clock, duration, etaText } from "./format.js";
import { buildTimeline, label, progress, tone } from "./status.js";

/** A coloured status badge. */
export function statusBadge(status, text = null) {
  return h("span", { class: `badge badge-${tone(status)}`, dataset: { status } }, text || label(status));
}

/** A thin lifecycle progress bar (decorative: the status is in the badge text). */
export function progressBar(status) {
  const bar = h("span", { class: `progress progress-${tone(status)}`, "aria-hidden": "true" }, h("span", { class: "progress-fill" }));
  bar.firstChild.style.width = `${Math.round(progress(status) * 100)}%`;
  return bar;
}

/**
 * A compact data table: its caption (for screen readers), one header row from `columns`
 * (`[heading, class]` pairs; a heading may be an element) and a row of `cells(item)` per item.
 */
export function dataTable(caption, columns, items, cells) {
  return h(
    "table",
    { class: "table table-fit" },
    h("caption", { class: "visually-hidden" }, caption),
    h("thead", {}, h("tr", {}, columns.map(([heading, cls]) => h("th", { scope: "col", class: cls }, heading)))),
    h("tbody", {}, items.map((item) => h("tr", {}, cells(item)))),
  );
}

/** A "+12.5%" chip, green up / red down, with a text alternative. */
export function changeChip(pct, what = "vs previous period") {
  const c = change(pct);
  const arrow = { up: "▲", down: "▼", flat: "■", none: "•" }[c.direction];
  return h(
    "span",
    { class: `chip chip-${c.direction}`, title: `${c.text} ${what}` },
    h("span", { "aria-hidden": "true" }, `${arrow} `),
    c.text,
    h("span", { class: "visually-hidden" }, ` ${what}`),
  );
}

/**
 * The steps of an order's timeline as list items (for an `ol`): the marker, the label
 * (" (current)" for screen readers on the current one), when it was reached and how long
 * it took, or "Pending"/"Skipped". The order page and a shared link's page draw it alike.
 */
export function timelineItems(status, statusTimes) {
  return buildTimeline(status, statusTimes).map((step, index) =>
    h(
      "li",
      {
        class: `step step-${step.state}`,
        dataset: { status: step.status, state: step.state },
        "aria-current": step.state === "current" ? "step" : null,
      },
      h("span", { class: "step-marker", "aria-hidden": "true" }, step.state === "done" ? "✓" : step.status === "CANCELLED" ? "✕" : String(index + 1)),
      h(
        "div",
        { class: "step-body" },
        h("span", { class: "step-label" }, step.label, step.state === "current" ? h("span", { class: "visually-hidden" }, " (current)") : null),
        step.enteredAt !== null
          ? h(
              "span",
              { class: "step-meta" },
              h("time", { datetime: new Date(step.enteredAt).toISOString() }, clock(new Date(step.enteredAt).toISOString())),
              step.seconds !== null ? h("span", { class: "step-duration", dataset: { running: step.running ? "1" : "" } }, step.running ? `${duration(step.seconds)} so far` : `took ${duration(step.seconds)}`) : null,
            )
          : h("span", { class: "step-meta muted" }, step.state === "skipped" ? "Skipped" : "Pending"),
      ),
    ),
  );
}

/** The "Progress" card around an order's timeline list (`timelineItems`). */
export function progressCard(timeline) {
  return h("section", { class: "card", "aria-labelledby": "timeline-title" }, h("h2", { id: "timeline-title" }, "Progress"), timeline);
}

/**
 * The "Delivery" card of the order page and a shared link's page: the heading with the map's
 * legend (`[swatch, text]` pairs; decorative, the facts say it), then the facts, the map and
 * the note under it.
 */
export function deliveryCard(legend, stats, map, note) {
  return h(
    "section",
    { class: "card order-map-card", "aria-labelledby": "map-title" },
    h(
      "div",
      { class: "card-head" },
      h("h2", { id: "map-title" }, "Delivery"),
      h(
        "span",
        { class: "map-legend", "aria-hidden": "true" },
        legend.map(([swatch, text]) => h("span", { class: "legend-item" }, h("span", { class: `legend-swatch swatch-${swatch}` }), text)),
      ),
    ),
    stats,
    map,
    note,
  );
}

/**
 * A delivery's "Arrives" fact: the arrival window (the time left in its title) and, when it
 * moved since the reader was told, by how much (`trackArrival`'s note); else "Delivered" or "–".
 */
export function arrivalFact(eta, tracker, status) {
  if (!eta) return status === "DELIVERED" ? "Delivered" : "–";
  const seconds = Math.max(0, (Date.parse(eta.arrives_at) - Date.now()) / 1000);
  const shift = tracker && tracker.note;
  return [h("span", { class: "eta-range", title: `${etaText(seconds)} from now` }, arrival(eta)), shift ? h("span", { class: "eta-shift", id: "eta-shift" }, ` · ${shift}`) : null];
}

/** A page's facts as `dl` rows: `[term, value, id]` each (the map's text equivalent). */
export function statRows(rows) {
  return rows.map(([term, value, id]) => h("div", { class: "stat" }, h("dt", {}, term), h("dd", { id }, value)));
}
