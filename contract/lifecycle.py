"""An order's lifecycle: its statuses, their order, and which moves are allowed.

Django's services refuse a change it does not allow, and the stream job, the read model
and the pages rank statuses by this one table, so none can disagree on what comes next.
"""

from __future__ import annotations

from enum import StrEnum


class OrderStatus(StrEnum):
    """The order lifecycle of the book's pizza shop, plus cancellation."""

    PLACED_ORDER = "PLACED_ORDER"
    ORDER_CONFIRMED = "ORDER_CONFIRMED"
    BEING_PREPARED = "BEING_PREPARED"
    BEING_COOKED = "BEING_COOKED"
    OUT_FOR_DELIVERY = "OUT_FOR_DELIVERY"
    ARRIVING_AT_DOOR = "ARRIVING_AT_DOOR"
    DELIVERED = "DELIVERED"
    CANCELLED = "CANCELLED"


#: The happy path, in order. Its index is the "rank" used to refuse going backwards.
LIFECYCLE: tuple[OrderStatus, ...] = (
    OrderStatus.PLACED_ORDER,
    OrderStatus.ORDER_CONFIRMED,
    OrderStatus.BEING_PREPARED,
    OrderStatus.BEING_COOKED,
    OrderStatus.OUT_FOR_DELIVERY,
    OrderStatus.ARRIVING_AT_DOOR,
    OrderStatus.DELIVERED,
)
TERMINAL_STATUSES = frozenset({OrderStatus.DELIVERED, OrderStatus.CANCELLED})
#: Cancellation is allowed only before the food leaves the restaurant.
CANCELLABLE_STATUSES = frozenset(LIFECYCLE[: LIFECYCLE.index(OrderStatus.OUT_FOR_DELIVERY)])
#: Statuses in which a courier is on the road and GPS points are expected.
IN_TRANSIT_STATUSES = frozenset({OrderStatus.OUT_FOR_DELIVERY, OrderStatus.ARRIVING_AT_DOOR})


def next_status(status: OrderStatus | str) -> OrderStatus | None:
    """The status that follows ``status`` on the happy path (None when terminal)."""
    status = OrderStatus(status)
    if status in TERMINAL_STATUSES:
        return None
    return LIFECYCLE[LIFECYCLE.index(status) + 1]


def status_rank(status: OrderStatus | str) -> int:
    """Position in the lifecycle; CANCELLED ranks after everything (it is terminal)."""
    status = OrderStatus(status)
    return len(LIFECYCLE) if status is OrderStatus.CANCELLED else LIFECYCLE.index(status)


def can_transition(current: OrderStatus | str, target: OrderStatus | str) -> bool:
    """Whether the lifecycle allows ``current`` -> ``target`` (one step, or a cancel)."""
    current, target = OrderStatus(current), OrderStatus(target)
    if target is OrderStatus.CANCELLED:
        return current in CANCELLABLE_STATUSES
    return next_status(current) is target


def status_label(status: OrderStatus | str) -> str:
    """What people read: ``OUT_FOR_DELIVERY`` -> ``Out for delivery``."""
    return OrderStatus(status).value.replace("_", " ").capitalize()


def status_time_field(status: OrderStatus | str) -> str:
    """Name of the enriched column holding when an order entered ``status``."""
    return f"{OrderStatus(status).value.lower()}_at"


STATUS_TIME_FIELDS: tuple[str, ...] = tuple(status_time_field(s) for s in OrderStatus)
