/**
 * Leaflet maps that work without internet: the base layer is a schematic
 * GeoJSON of Bengaluru shipped with the app (approximate outlines, lakes,
 * parks and major roads, labelled as schematic). Internet tiles are an opt-in
 * setting (MAP_TILE_URL) for production.
 *
 * Also: pin icons, and a courier marker that glides between GPS fixes.
 */
import * as L from "../../vendor/leaflet/leaflet-src.esm.js";
import { config } from "./config.js";

export { L };

/** The city centre and a zoom that shows the delivery area. */
export const CITY_CENTER = [12.9716, 77.5946];
export const CITY_ZOOM = 12;

const STYLES = {
  boundary: { color: "#8a94a8", weight: 2, dashArray: "6 6", fillColor: "#f2eee4", fillOpacity: 1 },
  water: { color: "#7fb2d9", weight: 1, fillColor: "#b9dcf3", fillOpacity: 1 },
  park: { color: "#9ccf9c", weight: 1, fillColor: "#cfe9c8", fillOpacity: 1 },
  ring: { color: "#f0b35a", weight: 5, opacity: 1 },
  road: { color: "#ffffff", weight: 3.5, opacity: 1 },
  road_casing: { color: "#cbbfa8", weight: 6, opacity: 1 },
};

let schematicPromise = null;

/** The schematic base layer's GeoJSON (fetched once per page). */
function loadSchematic() {
  if (!schematicPromise) {
    schematicPromise = fetch(config.map.schematicUrl, { credentials: "same-origin" }).then((r) => {
      if (!r.ok) throw new Error(`schematic map: HTTP ${r.status}`);
      return r.json();
    });
  }
  return schematicPromise;
}

function addSchematic(map) {
  // Own panes keep the base layer under the routes and markers, however late it loads.
  map.createPane("schematic").style.zIndex = "250";
  map.createPane("schematicLabels").style.zIndex = "450";
  map.getPane("schematicLabels").style.pointerEvents = "none";
  const group = L.layerGroup().addTo(map);
  loadSchematic()
    .then((data) => {
      const features = data.features || [];
      const byKind = (kinds) => ({ ...data, features: features.filter((f) => kinds.includes(f.properties.kind)) });
      const style = (f) => STYLES[f.properties.kind] || STYLES.road;
      const base = { interactive: false, pane: "schematic" };
      L.geoJSON(byKind(["boundary"]), { ...base, style }).addTo(group);
      L.geoJSON(byKind(["park", "water"]), { ...base, style }).addTo(group);
      L.geoJSON(byKind(["road"]), { ...base, style: () => STYLES.road_casing }).addTo(group);
      L.geoJSON(byKind(["road", "ring"]), { ...base, style }).addTo(group);
      L.geoJSON(byKind(["locality"]), {
        pointToLayer: (feature, latlng) =>
          L.marker(latlng, {
            pane: "schematicLabels",
            interactive: false,
            keyboard: false,
            icon: L.divIcon({ className: "map-label", html: escapeHtml(feature.properties.name), iconSize: null }),
          }),
      }).addTo(group);
    })
    .catch(() => {
      /* The markers and the route still show; the base layer is a nicety. */
    });
  return group;
}

/**
 * A map in `element`: the offline schematic (or the configured tiles), with an
 * accessible name. `label` describes the map for screen readers.
 */
export function createMap(element, { label, center = CITY_CENTER, zoom = CITY_ZOOM } = {}) {
  const map = L.map(element, { zoomControl: true, attributionControl: true, zoomSnap: 0.25 }).setView(center, zoom);
  map.attributionControl.setPrefix(false);
  element.setAttribute("role", "region");
  element.setAttribute("aria-label", label || "Map");
  if (config.map.tileUrl) {
    L.tileLayer(config.map.tileUrl, { attribution: config.map.tileAttribution || "", maxZoom: 19 }).addTo(map);
  } else {
    addSchematic(map);
    map.attributionControl.addAttribution("Schematic base map of Bengaluru: approximate, not to scale");
    element.classList.add("map-schematic");
  }
  return map;
}

/** A round pin (restaurant, home, courier) as a div icon: no image requests. */
export function pinIcon(kind, text) {
  const glyphs = {
    restaurant:
      '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M7 2v9a3 3 0 0 0 2 2.83V22h2v-8.17A3 3 0 0 0 13 11V2h-1.5v7h-1V2h-1v7h-1V2H7zm10 0c-1.7 0-3 2.24-3 5v6h2v9h2V2h-1z" fill="currentColor"/></svg>',
    home: '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M12 3 2 12h3v9h6v-6h2v6h6v-9h3L12 3z" fill="currentColor"/></svg>',
    courier:
      '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M5 11a4 4 0 1 0 0 8 4 4 0 0 0 0-8zm0 6a2 2 0 1 1 0-4 2 2 0 0 1 0 4zm14-6a4 4 0 1 0 0 8 4 4 0 0 0 0-8zm0 6a2 2 0 1 1 0-4 2 2 0 0 1 0 4zM15.5 5H13v2h1.8l1.6 3H10l-1-2H6v2h1.8l1.9 3.6L8.5 15H11l1-2h4.2l.9-1.6L15.5 5z" fill="currentColor"/></svg>',
    dot: "",
  };
  return L.divIcon({
    className: `pin pin-${kind}`,
    html: `<span class="pin-body">${glyphs[kind] || ""}</span>${text ? `<span class="pin-text">${escapeHtml(text)}</span>` : ""}`,
    iconSize: [34, 34],
    iconAnchor: [17, 17],
  });
}

/** A marker that is only decoration: the same facts are in the text beside the map. */
export function staticMarker(latlng, icon, title) {
  return L.marker(latlng, { icon, interactive: false, keyboard: false, title, alt: title });
}

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

const reducedMotion = window.matchMedia ? window.matchMedia("(prefers-reduced-motion: reduce)") : { matches: false };

/**
 * A marker that moves smoothly: `moveTo()` interpolates from where it is drawn
 * now to the new fix over `ms` (linear in lat/lon, fine at street scale), and
 * calls `onFrame(latlng)` each frame so a trail can follow it. A newer fix
 * arriving mid-animation starts from the current drawn position: no jumps.
 */
export class GlidingMarker {
  constructor(map, latlng, icon, title) {
    this.marker = staticMarker(latlng, icon, title).addTo(map);
    this.frame = null;
    this.onFrame = null;
  }

  get latlng() {
    return this.marker.getLatLng();
  }

  moveTo(target, ms = 1500) {
    cancelAnimationFrame(this.frame);
    const from = this.marker.getLatLng();
    const to = L.latLng(target);
    if (reducedMotion.matches || ms <= 0 || from.equals(to)) {
      this.marker.setLatLng(to);
      if (this.onFrame) this.onFrame(to, true);
      return;
    }
    const start = performance.now();
    const step = (now) => {
      const t = Math.min(1, (now - start) / ms);
      const eased = t < 0.5 ? 2 * t * t : 1 - (-2 * t + 2) ** 2 / 2; // ease in-out
      const here = L.latLng(from.lat + (to.lat - from.lat) * eased, from.lng + (to.lng - from.lng) * eased);
      this.marker.setLatLng(here);
      if (this.onFrame) this.onFrame(here, t >= 1);
      if (t < 1) this.frame = requestAnimationFrame(step);
    };
    this.frame = requestAnimationFrame(step);
  }

  remove() {
    cancelAnimationFrame(this.frame);
    this.marker.remove();
  }
}

/**
 * Glide a courier's marker to a newer GPS fix over about the time between the two fixes
 * (0.4 to 3 s, so it moves steadily without lagging behind), and pan when the fix nears the
 * map's edge.
 */
export function glideToFix(map, marker, previous, position) {
  const target = [position.lat, position.lon];
  const gap = previous ? Date.parse(position.at) - Date.parse(previous.at) : 1000;
  marker.moveTo(target, Math.max(400, Math.min(Number.isFinite(gap) ? gap : 1000, 3000)));
  if (!map.getBounds().pad(-0.1).contains(target)) map.panTo(target, { animate: true });
}
