/** Small pieces of UI shared by the pages: status badges, progress bars, change chips, tables. */
import { h } from "./dom.js";
import { change } from "./format.js";
import { label, progress, tone } from "./status.js";

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
