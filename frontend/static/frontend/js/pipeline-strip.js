/**
 * The pipeline strip on the operations page: each stage (outbox relay, Spark stream
 * job, Pinot ingestion, push bridge) with its lag and rate, amber when behind and red
 * when stalled. The operators' socket pushes a "pipeline" message after every sample
 * of tracker/operations/pipeline.py; this only draws it.
 */
import { h, replace } from "./dom.js";

const LABELS = { ok: "OK", behind: "Behind", stalled: "Stalled", unknown: "Not reporting" };

function count(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString();
}

function stage(s) {
  const detail = s.status === "unknown"
    ? (s.error || "no figures")
    : `${s.rate === null ? "–" : s.rate.toFixed(1)}/s` +
      (s.stuck_seconds ? ` · not moving for ${Math.round(s.stuck_seconds)} s` : "");
  return h(
    "li",
    { class: "pipeline-stage", "data-stage": s.name, "data-status": s.status },
    h("span", { class: "pipeline-name" }, s.label),
    h("span", { class: "pipeline-status" }, LABELS[s.status] || s.status),
    h("span", { class: "pipeline-lag" }, `lag ${count(s.lag)}`),
    h("span", { class: "pipeline-rate" }, detail),
  );
}

export function renderPipeline(list, snapshot) {
  replace(list, ...snapshot.stages.map(stage));
  list.dataset.status = snapshot.status;
}
