/** Small pieces of UI shared by the pages: status badges, progress bars, change chips, tables, the order timeline and a page's facts list. */
import { h } from "./dom.js";
import { change, clock, duration } from "./format.js";
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

/** A page's facts as `dl` rows: `[term, value, id]` each (the map's text equivalent). */
export function statRows(rows) {
  return rows.map(([term, value, id]) => h("div", { class: "stat" }, h("dt", {}, term), h("dd", { id }, value)));
}
