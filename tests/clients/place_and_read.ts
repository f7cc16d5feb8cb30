// A mobile/web client's use of the generated types: place an order, then read it.
// tests/system/api/test_api_clients.py compiles this with tsc against types generated from the live
// schema; it fails the build when the schema stops describing what this code relies on.
import type { components, paths } from "./ordertrack";

type PlaceOrder = components["schemas"]["PlaceOrderRequest"];
type OrderDetail = components["schemas"]["OrderDetail"];
type ApiError = components["schemas"]["Error"];
type Placed = paths["/api/v1/orders/"]["post"]["responses"]["201"]["content"]["application/json"];
type Page = paths["/api/v1/orders/"]["get"]["responses"]["200"]["content"]["application/json"];
type Ticket = paths["/api/v1/auth/socket-ticket/"]["post"]["responses"]["201"]["content"]["application/json"];

export class ApiFailure extends Error {
  constructor(readonly problem: ApiError["error"]) {
    super(`${problem.status} ${problem.code}: ${problem.message}`);
  }
}

async function call<T>(response: Response): Promise<T> {
  if (!response.ok) throw new ApiFailure(((await response.json()) as ApiError).error);
  return (await response.json()) as T;
}

export async function placeAndRead(
  base: string,
  token: string,
  order: PlaceOrder,
  idempotencyKey: string,
): Promise<{ detail: OrderDetail; activeIds: number[] }> {
  const headers = { Authorization: `Token ${token}`, "Content-Type": "application/json" };
  const placed = await call<Placed>(
    await fetch(`${base}/api/v1/orders/`, {
      method: "POST",
      headers: { ...headers, "Idempotency-Key": idempotencyKey },
      body: JSON.stringify(order),
    }),
  );
  const detail = await call<OrderDetail>(await fetch(`${base}/api/v1/orders/${placed.id}/`, { headers }));
  const page = await call<Page>(await fetch(`${base}/api/v1/orders/?state=active`, { headers }));
  const arrives: string | undefined = detail.eta?.arrives_at;
  const steps: string[] = detail.timeline.map((step) => `${step.label}: ${step.state}`);
  console.log(detail.status, detail.total, arrives ?? "no estimate", steps.join(", "));
  return { detail, activeIds: page.results.map((summary) => summary.id) };
}

export const example: PlaceOrder = {
  restaurant_id: 1,
  items: [{ product_id: 3, quantity: 2 }],
  address_id: 7,
};

// A browser cannot set Authorization on a WebSocket: it trades its token for a one-time
// ticket and opens the socket with that, never with the key in the URL.
export async function followOrder(base: string, token: string, orderId: number): Promise<WebSocket> {
  const ticket = await call<Ticket>(
    await fetch(`${base}/api/v1/auth/socket-ticket/`, { method: "POST", headers: { Authorization: `Token ${token}` } }),
  );
  const expires: Date = new Date(ticket.expires_at);
  console.log(`ticket good until ${expires.toISOString()}`);
  const ws = base.replace(/^http/, "ws");
  return new WebSocket(`${ws}/ws/orders/${orderId}/?ticket=${encodeURIComponent(ticket.ticket)}`);
}
