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
  return h(
    "figure",
    { class: "chart-figure" },
    svg,
    h(
      "figcaption",
      { class: "chart-legend" },
      h("span", { class: "legend-item" }, h("span", { class: "legend-swatch swatch-current" }), currentLabel),
      h("span", { class: "legend-item" }, h("span", { class: "legend-swatch swatch-previous" }), previousLabel),
    ),
  );
}

function truncate(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}
