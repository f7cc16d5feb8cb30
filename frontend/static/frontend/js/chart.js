/**
 * A horizontal grouped bar chart in SVG (no chart library): one row per
 * category, the current period's bar above the previous period's.
 * The SVG is an image with a text summary; the data is also in a table on the page.
 */
import { h, s } from "./dom.js";

/**
 * @param {{label: string, current: number, previous: number}[]} rows
 * @param {{format: (n: number) => string, title: string, currentLabel: string, previousLabel: string}} options
 */
export function groupedBarChart(rows, { format, title, currentLabel = "This period", previousLabel = "Previous period" }) {
  const labelWidth = 170;
  const valueWidth = 80;
  const barArea = 420;
  const rowHeight = 38;
  const top = 8;
  const width = labelWidth + barArea + valueWidth;
  const height = top + rows.length * rowHeight + 8;
  const max = Math.max(1, ...rows.flatMap((r) => [r.current, r.previous]));
  const scale = (v) => Math.max(v > 0 ? 2 : 0, (v / max) * barArea);
  const svg = s("svg", {
    class: "chart",
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": `${title}. ${rows.map((r) => `${r.label}: ${format(r.current)} (previous ${format(r.previous)})`).join("; ")}`,
    preserveAspectRatio: "xMinYMin meet",
  });
  svg.append(s("title", { text: title }));
  for (const x of [0.25, 0.5, 0.75, 1]) {
    svg.append(s("line", { x1: labelWidth + x * barArea, x2: labelWidth + x * barArea, y1: 0, y2: height, class: "chart-grid" }));
  }
  rows.forEach((row, i) => {
    const y = top + i * rowHeight;
    svg.append(
      s("text", { x: labelWidth - 10, y: y + 19, class: "chart-label", "text-anchor": "end" }, truncate(row.label, 22)),
      s("rect", { x: labelWidth, y: y + 4, width: scale(row.current), height: 13, rx: 3, class: "chart-bar-current" }),
      s("rect", { x: labelWidth, y: y + 19, width: scale(row.previous), height: 9, rx: 3, class: "chart-bar-previous" }),
      s("text", { x: labelWidth + scale(row.current) + 6, y: y + 15, class: "chart-value" }, format(row.current)),
    );
  });
  return figure(svg, currentLabel, previousLabel, "swatch-previous");
}

/** A chart with its legend: the current period, and the period before drawn as `previousSwatch`. */
function figure(svg, currentLabel, previousLabel, previousSwatch) {
  return h(
    "figure",
    { class: "chart-figure" },
    svg,
    h(
      "figcaption",
      { class: "chart-legend" },
      h("span", { class: "legend-item" }, h("span", { class: "legend-swatch swatch-current" }), currentLabel),
      h("span", { class: "legend-item" }, h("span", { class: `legend-swatch ${previousSwatch}` }), previousLabel),
    ),
  );
}

function truncate(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

/**
 * Bars over time (the current period) with the period before as a line over the
 * same buckets, so "is this hour busier than the same hour yesterday" reads at a glance.
 *
 * @param {{label: string, current: number, previous: number}[]} buckets oldest first
 * The drawing is laid out for `width` CSS pixels (the container's width), so its
 * text stays legible on a phone instead of shrinking with the whole picture.
 *
 * @param {{format: (n: number) => string, title: string, currentLabel: string, previousLabel: string, width?: number}} options
 */
export function timeSeriesChart(buckets, { format, title, currentLabel, previousLabel, width: available = 984 }) {
  const left = 92; // room for "US$1,234.00"
  const bottom = 26;
  const top = 10;
  const plotW = Math.max(200, Math.min(available, 1100) - left - 12);
  const tickEvery = Math.max(1, Math.ceil((buckets.length * 56) / plotW)); // labels never overlap
  const plotH = available < 520 ? 150 : 190;
  const width = left + plotW + 12;
  const height = top + plotH + bottom;
  const max = Math.max(1, ...buckets.flatMap((b) => [b.current, b.previous]));
  const step = plotW / Math.max(1, buckets.length);
  const y = (v) => top + plotH - (v / max) * plotH;
  const total = (key) => buckets.reduce((n, b) => n + b[key], 0);
  const svg = s("svg", {
    class: "chart chart-series",
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": `${title}. ${currentLabel}: ${format(total("current"))} in all; ${previousLabel}: ${format(total("previous"))}. Busiest: ${busiest(buckets, format)}.`,
    preserveAspectRatio: "xMinYMin meet",
  });
  svg.append(s("title", { text: title }));
  for (const f of [0, 0.5, 1]) {
    svg.append(
      s("line", { x1: left, x2: left + plotW, y1: y(max * f), y2: y(max * f), class: "chart-grid" }),
      s("text", { x: left - 8, y: y(max * f) + 4, class: "chart-label", "text-anchor": "end" }, format(max * f)),
    );
  }
  buckets.forEach((b, i) => {
    const x = left + i * step;
    const barH = Math.max(b.current > 0 ? 2 : 0, (b.current / max) * plotH);
    svg.append(s("rect", { x: x + step * 0.15, y: top + plotH - barH, width: step * 0.7, height: barH, rx: 2, class: "chart-bar-current" }, s("title", { text: `${b.label}: ${format(b.current)} (before: ${format(b.previous)})` })));
    if (i % tickEvery === 0) svg.append(s("text", { x: x + step / 2, y: height - 8, class: "chart-label", "text-anchor": "middle" }, b.label));
  });
  const points = buckets.map((b, i) => `${left + i * step + step / 2},${y(b.previous)}`).join(" ");
  svg.append(s("polyline", { points, class: "chart-line-previous", fill: "none" }));
  return figure(svg, currentLabel, previousLabel, "swatch-previous-line");
}

function busiest(buckets, format) {
  if (!buckets.length) return "none";
  const top = buckets.reduce((a, b) => (b.current > a.current ? b : a));
  return `${top.label}, ${format(top.current)}`;
}
