/**
 * Draw a polygon on a Leaflet map, no plugin: click to add vertices; finish by
 * clicking the first vertex, double-clicking, pressing Enter or the Finish
 * button; Backspace removes the last vertex, Escape cancels (while drawing). The result is a
 * closed GeoJSON Polygon ([lon, lat] positions).
 */
import { L } from "./map.js";

export class PolygonDrawer {
  /**
   * @param {L.Map} map
   * @param {{onChange?: (drawer: PolygonDrawer) => void, onComplete: (geojson: object) => void}} handlers
   */
  constructor(map, { onChange = () => {}, onComplete }) {
    this.map = map;
    this.onChange = onChange;
    this.onComplete = onComplete;
    this.vertices = [];
    this.active = false;
    this.layer = L.layerGroup().addTo(map);
    this.shape = null;
    this.onClick = (e) => this.add(e.latlng);
    this.onDblClick = (e) => {
      L.DomEvent.stop(e);
      this.finish();
    };
    this.onKey = (e) => {
      if (!this.active || e.target.closest("input, select, textarea")) return;
      if (e.key === "Escape") this.cancel();
      else if (e.key === "Enter") this.finish();
      else if (e.key === "Backspace") {
        e.preventDefault();
        this.undo();
      }
    };
  }

  /** Start drawing (clears any previous area). */
  start() {
    this.clear();
    this.active = true;
    this.map.doubleClickZoom.disable();
    this.map.getContainer().classList.add("is-drawing");
    this.map.on("click", this.onClick);
    this.map.on("dblclick", this.onDblClick);
    document.addEventListener("keydown", this.onKey);
    this.onChange(this);
  }

  add(latlng) {
    if (!this.active) return;
    const last = this.vertices[this.vertices.length - 1];
    if (last && last.equals(latlng)) return; // the second click of a double-click
    this.vertices.push(latlng);
    this.redraw();
    this.onChange(this);
  }

  undo() {
    this.vertices.pop();
    this.redraw();
    this.onChange(this);
  }

  get canFinish() {
    return this.active && this.vertices.length >= 3;
  }

  finish() {
    if (!this.canFinish) return;
    this.stopListening();
    this.active = false;
    this.redraw();
    this.onChange(this);
    this.onComplete(this.toGeoJSON());
  }

  /** A ready-made area (e.g. the visible map rectangle), as if drawn. */
  setVertices(latlngs) {
    this.clear();
    this.vertices = latlngs.map((p) => L.latLng(p));
    this.redraw();
    this.onChange(this);
    this.onComplete(this.toGeoJSON());
  }

  cancel() {
    this.clear();
    this.onChange(this);
  }

  clear() {
    this.stopListening();
    this.active = false;
    this.vertices = [];
    this.layer.clearLayers();
    this.shape = null;
  }

  stopListening() {
    this.map.off("click", this.onClick);
    this.map.off("dblclick", this.onDblClick);
    document.removeEventListener("keydown", this.onKey);
    this.map.getContainer().classList.remove("is-drawing");
    this.map.doubleClickZoom.enable();
  }

  redraw() {
    this.layer.clearLayers();
    if (!this.vertices.length) return;
    const style = { color: "#7c3aed", weight: 3, fillColor: "#7c3aed", fillOpacity: 0.12, interactive: false };
    this.shape = (this.active ? L.polyline(this.vertices, style) : L.polygon(this.vertices, style)).addTo(this.layer);
    this.vertices.forEach((latlng, index) => {
      const vertex = L.circleMarker(latlng, {
        radius: index === 0 && this.active ? 8 : 5,
        color: "#7c3aed",
        weight: 2,
        fillColor: "#fff",
        fillOpacity: 1,
        interactive: index === 0 && this.active,
        bubblingMouseEvents: false,
      }).addTo(this.layer);
      if (index === 0 && this.active) vertex.on("click", () => this.finish());
    });
  }

  /** The closed ring as a GeoJSON Polygon. */
  toGeoJSON() {
    const ring = this.vertices.map((p) => [Number(p.lng.toFixed(6)), Number(p.lat.toFixed(6))]);
    if (ring.length) ring.push([...ring[0]]);
    return { type: "Polygon", coordinates: [ring] };
  }
}
