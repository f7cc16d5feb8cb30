/**
 * The page's configuration, rendered by the Django view with `json_script`
 * (data, not code: the pages need no inline script).
 */
const node = document.getElementById("page-config");

/** @type {{apiRoot: string, wsRoot: string, currency: string, user: {username: string, roles: string[], isOperator: boolean}, map: {tileUrl: string, tileAttribution: string, schematicUrl: string}, urls: Record<string, string>, lifecycle: string[], orderId?: number}} */
export const config = node ? JSON.parse(node.textContent) : { apiRoot: "/api/v1/", wsRoot: "/ws/", urls: {}, user: { roles: [] }, map: {}, lifecycle: [] };

/** The URL of an order's page. */
export function orderUrl(id) {
  return (config.urls.order || "/orders/{id}/").replace("{id}", String(id));
}
