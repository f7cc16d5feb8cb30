/**
 * Place an order: pick a restaurant, browse its menu by category, build a cart,
 * choose a saved address and submit. The request carries an Idempotency-Key
 * that stays the same until the cart or the address changes, so a double
 * click, or a retry after a network error, never places two orders.
 */
import { api } from "../api.js";
import { config, orderUrl } from "../config.js";
import { announce, emptyState, errorState, h, loadingState, replace } from "../dom.js";
import { money } from "../format.js";

const els = {
  restaurant: document.getElementById("restaurant"),
  categories: document.getElementById("menu-categories"),
  menu: document.getElementById("menu"),
  cart: document.getElementById("cart-lines"),
  total: document.getElementById("cart-total"),
  count: document.getElementById("cart-count"),
  address: document.getElementById("address"),
  addressHelp: document.getElementById("address-help"),
  form: document.getElementById("checkout"),
  submit: document.getElementById("place-order"),
  error: document.getElementById("checkout-error"),
};

/** product id -> {product, quantity} */
const cart = new Map();
let products = new Map();
let restaurants = [];
let idempotencyKey = null;
let submitting = false;

/** A random UUID (works outside secure contexts too). */
function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The order changed: the next submit is a new order, with a new key. */
function orderChanged() {
  idempotencyKey = null;
  els.error.hidden = true;
}

function slug(text) {
  return String(text).toLowerCase().replace(/[^a-z0-9]+/g, "-");
}

// ------------------------------------------------------------------ menu

function stepper(product) {
  const line = cart.get(product.id);
  const quantity = line ? line.quantity : 0;
  if (!product.is_available) return h("span", { class: "muted" }, "Sold out");
  if (!quantity) {
    return h("button", { type: "button", class: "btn btn-primary btn-small", onclick: () => setQuantity(product, 1), "aria-label": `Add ${product.name} to cart` }, "Add");
  }
  return h(
    "span",
    { class: "stepper", role: "group", "aria-label": `${product.name} quantity` },
    h("button", { type: "button", class: "btn btn-icon", onclick: () => setQuantity(product, quantity - 1), "aria-label": `Remove one ${product.name}` }, "−"),
    h("span", { class: "stepper-value", "aria-live": "off" }, String(quantity)),
    h("button", { type: "button", class: "btn btn-icon", onclick: () => setQuantity(product, quantity + 1), "aria-label": `Add one more ${product.name}`, disabled: quantity >= 20 }, "+"),
  );
}

function productCard(product) {
  return h(
    "li",
    { class: "product", dataset: { productId: product.id } },
    h("img", { class: "product-img", src: product.image_url || "", alt: "", width: "72", height: "72", loading: "lazy" }),
    h(
      "div",
      { class: "product-body" },
      h("h3", { class: "product-name" }, product.name),
      product.description ? h("p", { class: "product-desc muted" }, product.description) : null,
      h("div", { class: "product-foot" }, h("span", { class: "price" }, money(product.price)), h("span", { class: "product-action" }, stepper(product))),
    ),
  );
}

function renderMenu(menu) {
  products = new Map();
  const categories = menu.categories || [];
  if (!categories.length) {
    replace(els.categories);
    replace(els.menu, emptyState("This restaurant has no menu yet"));
    return;
  }
  replace(
    els.categories,
    categories.map((c) => h("li", {}, h("a", { class: "chip-link", href: `#cat-${slug(c.name)}` }, c.name))),
  );
  replace(
    els.menu,
    categories.map((category) => {
      category.products.forEach((p) => products.set(p.id, p));
      return h(
        "section",
        { class: "menu-category", id: `cat-${slug(category.name)}`, "aria-labelledby": `cat-title-${slug(category.name)}` },
        h("h2", { id: `cat-title-${slug(category.name)}` }, category.name),
        h("ul", { class: "products" }, category.products.map(productCard)),
      );
    }),
  );
}

function refreshProduct(product) {
  const slot = els.menu.querySelector(`[data-product-id="${product.id}"] .product-action`);
  if (slot) {
    const hadFocus = slot.contains(document.activeElement);
    replace(slot, stepper(product));
    if (hadFocus) (slot.querySelector("button:last-of-type") || slot.querySelector("button"))?.focus();
  }
}

// ------------------------------------------------------------------ cart

function setQuantity(product, quantity) {
  if (quantity <= 0) cart.delete(product.id);
  else cart.set(product.id, { product, quantity: Math.min(quantity, 20) });
  orderChanged();
  refreshProduct(product);
  renderCart();
  announce(quantity > 0 ? `${product.name}: ${quantity} in cart.` : `${product.name} removed from cart.`);
}

function cartTotal() {
  let cents = 0;
  for (const { product, quantity } of cart.values()) cents += Math.round(Number(product.price) * 100) * quantity;
  return (cents / 100).toFixed(2);
}

function renderCart() {
  const lines = [...cart.values()];
  const count = lines.reduce((n, l) => n + l.quantity, 0);
  els.count.textContent = count ? `${count} item${count === 1 ? "" : "s"}` : "Empty";
  if (!lines.length) {
    replace(els.cart, h("li", { class: "cart-empty muted" }, "Your cart is empty. Add dishes from the menu."));
  } else {
    replace(
      els.cart,
      lines.map(({ product, quantity }) =>
        h(
          "li",
          { class: "cart-line" },
          h("span", { class: "cart-qty" }, `${quantity}×`),
          h("span", { class: "cart-name" }, product.name),
          h("span", { class: "cart-price" }, money((Math.round(Number(product.price) * 100) * quantity) / 100)),
          h("button", { type: "button", class: "btn btn-icon btn-ghost", onclick: () => setQuantity(product, 0), "aria-label": `Remove ${product.name} from cart` }, "✕"),
        ),
      ),
    );
  }
  els.total.textContent = money(cartTotal());
  updateSubmit();
}

function updateSubmit() {
  const restaurant = restaurants.find((r) => String(r.id) === els.restaurant.value);
  const ready = cart.size > 0 && els.address.value && restaurant && restaurant.is_open;
  els.submit.disabled = !ready || submitting;
  els.submit.setAttribute("aria-disabled", String(!ready || submitting));
}

// ------------------------------------------------------------------ submit

async function submit(event) {
  event.preventDefault();
  if (submitting || !cart.size) return; // a second click while the first is in flight
  submitting = true;
  updateSubmit();
  els.submit.textContent = "Placing your order…";
  els.error.hidden = true;
  if (!idempotencyKey) idempotencyKey = uuid();
  try {
    const order = await api("orders/", {
      method: "POST",
      headers: { "Idempotency-Key": idempotencyKey },
      body: {
        restaurant_id: Number(els.restaurant.value),
        address_id: Number(els.address.value),
        items: [...cart.values()].map(({ product, quantity }) => ({ product_id: product.id, quantity })),
      },
    });
    announce(`Order #${order.id} placed.`);
    window.location.assign(orderUrl(order.id));
  } catch (error) {
    submitting = false;
    els.submit.textContent = "Place order";
    updateSubmit();
    const details = error.fields ? Object.entries(error.fields).map(([field, msgs]) => `${field}: ${[].concat(msgs).join(" ")}`) : [];
    replace(els.error, h("p", { class: "state-title" }, "Your order was not placed"), h("p", {}, error.message), details.length ? h("ul", {}, details.map((d) => h("li", {}, d))) : null);
    els.error.hidden = false;
    els.error.focus();
  }
}

// ------------------------------------------------------------------ loading

async function loadMenu() {
  const id = els.restaurant.value;
  replace(els.menu, loadingState("Loading the menu…"));
  replace(els.categories);
  try {
    renderMenu(await api(`restaurants/${id}/menu/`));
  } catch (error) {
    replace(els.menu, errorState(error, loadMenu));
  }
  const restaurant = restaurants.find((r) => String(r.id) === id);
  document.getElementById("restaurant-closed").hidden = !restaurant || restaurant.is_open;
  updateSubmit();
}

function onRestaurantChange() {
  if (cart.size && !window.confirm("Changing restaurant empties your cart. Continue?")) {
    els.restaurant.value = els.restaurant.dataset.current;
    return;
  }
  els.restaurant.dataset.current = els.restaurant.value;
  cart.clear();
  orderChanged();
  renderCart();
  loadMenu();
  const url = new URL(location.href);
  url.searchParams.set("restaurant", els.restaurant.value);
  history.replaceState(null, "", url);
}

async function start() {
  replace(els.menu, loadingState("Loading restaurants…"));
  let addresses;
  try {
    [restaurants, addresses] = await Promise.all([api("restaurants/"), api("me/addresses/")]);
  } catch (error) {
    replace(els.menu, errorState(error, start));
    return;
  }
  if (!restaurants.length) {
    replace(els.menu, emptyState("No restaurants yet", "Restaurants appear here once they are set up."));
    return;
  }
  replace(
    els.restaurant,
    restaurants.map((r) => h("option", { value: r.id }, r.is_open ? r.name : `${r.name} (closed)`)),
  );
  const wanted = new URL(location.href).searchParams.get("restaurant");
  const initial = restaurants.find((r) => String(r.id) === wanted) || restaurants.find((r) => r.is_open) || restaurants[0];
  els.restaurant.value = String(initial.id);
  els.restaurant.dataset.current = els.restaurant.value;
  els.restaurant.disabled = false;
  if (addresses.length) {
    replace(
      els.address,
      addresses.map((a) => h("option", { value: a.id }, `${a.label ? `${a.label}: ` : ""}${a.line1}${a.city ? `, ${a.city}` : ""}`)),
    );
    els.address.value = String((addresses.find((a) => a.is_default) || addresses[0]).id);
    els.address.disabled = false;
    els.addressHelp.textContent = "Your saved delivery addresses.";
  } else {
    replace(els.address, h("option", { value: "" }, "No saved addresses"));
    replace(els.addressHelp, "You have no saved delivery address yet. ", h("a", { href: config.urls.addresses }, "Add an address"), " to order.");
  }
  els.restaurant.addEventListener("change", onRestaurantChange);
  els.address.addEventListener("change", () => {
    orderChanged();
    updateSubmit();
  });
  els.form.addEventListener("submit", submit);
  renderCart();
  await loadMenu();
}

if (config.user.roles.includes("customer")) start();
