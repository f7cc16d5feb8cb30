"""Moving an order along its lifecycle: who may make which step (the policy), what the
lifecycle allows, and the status change written with its event in one transaction."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from contract import events
from contract.events import IN_TRANSIT_STATUSES, OrderStatus, epoch_ms
from tracker.couriers.models import Courier
from tracker.orders import policy
from tracker.orders.models import Order, OrderStatusChange
from tracker.orders.services.errors import IllegalTransition, OrderError
from tracker.outbox.services import enqueue


def when(at: datetime | None) -> datetime:
    """A command's time: ``at`` when the caller gives one (the simulator's clock), else now."""
    return at if at is not None else timezone.now()


def record_status(
    order: Order,
    status: OrderStatus,
    previous: OrderStatus | None,
    at: datetime,
    actor: str,
) -> None:
    """Write the status change's row and enqueue its ``order_statuses`` event."""
    event = events.OrderStatusChanged(
        event_id=str(uuid.uuid4()),
        event_time=epoch_ms(at),
        order_id=order.pk,
        placed_at=epoch_ms(order.created_at),
        status=status.value,
        previous_status=previous.value if previous else None,
        courier_id=order.courier_id,
        customer_id=order.customer_id,
        restaurant_id=order.restaurant_id,
    )
    OrderStatusChange.objects.create(
        order=order,
        status=status.value,
        previous_status=previous.value if previous else "",
        changed_at=at,
        event_id=event.event_id,
        actor=actor[:150],
    )
    enqueue(event)


def _actor(by: policy.Actor, via: str) -> str:
    """What the status change records as its actor: the channel (``via``: api, admin,
    simulator) and the user acting through it ("api:alice"; the system: the channel)."""
    if by is policy.SYSTEM:
        return via or "system"
    return f"{via or 'user'}:{by.get_username()}"


def _locked(by: policy.Actor, order_id: int) -> Order:
    """The order, locked for the transaction: the command's one read of it and its one
    access check. NotVisible when ``by`` may not see it (404, like a missing order)."""
    order = (
        policy.visible_orders(by)
        .select_related("restaurant")
        .select_for_update(of=("self",))
        .filter(pk=order_id)
        .first()
    )
    if order is None:
        raise policy.NotVisible(order_id)
    return order


def _check_move(by: policy.Actor, order: Order, target: OrderStatus | None) -> None:
    """Whether ``by`` may move ``order`` to ``target`` now (None: there is no next step):
    who may, by :mod:`tracker.orders.policy` (PermissionDenied), then what the lifecycle
    allows (IllegalTransition). The one place a status change is judged."""
    if target is OrderStatus.CANCELLED:
        if not policy.can_cancel(by, order):
            raise PermissionDenied("Couriers cannot cancel orders.")
    elif target is not None and not policy.can_move_to(by, order, target):
        raise PermissionDenied(f"You may not move this order to {target}.")
    current = OrderStatus(order.status)
    if target is not None and events.can_transition(current, target):
        return
    if target is None:
        message = f"order {order.pk} is {current.value}, which is final"
    elif target is OrderStatus.CANCELLED:
        message = (
            f"order {order.pk} is {current.value} and can no longer be cancelled "
            f"(cancellation is allowed only before {OrderStatus.OUT_FOR_DELIVERY.value})"
        )
    else:
        following = events.next_status(current)
        message = f"order {order.pk} cannot go from {current.value} to {target.value}" + (
            f"; the next status is {following.value}" if following else "; it is final"
        )
    raise IllegalTransition(message, field="status")


def _move(
    order: Order,
    target: OrderStatus,
    *,
    actor: str,
    courier: Courier | None,
    at: datetime | None,
) -> Order:
    """Write the judged change on the locked ``order`` and enqueue its event."""
    previous = OrderStatus(order.status)
    now = when(at)
    if target is OrderStatus.OUT_FOR_DELIVERY:
        order.courier = courier or order.courier or _pick_courier()
    elif courier is not None:
        order.courier = courier
    order.status = target.value
    order.status_changed_at = now
    order.updated_at = now
    order.save(update_fields=["status", "status_changed_at", "updated_at", "courier"])
    record_status(order, target, previous, now, actor)
    return order


def advance_order(
    order_id: int,
    *,
    by: policy.Actor,
    to: OrderStatus | str | None = None,
    via: str = "",
    courier: Courier | None = None,
    at: datetime | None = None,
) -> Order:
    """Move an order to ``to`` (default: its next step along the happy path) for ``by``,
    as :func:`tracker.orders.policy.can_move_to` allows: NotVisible for an order they
    may not see, PermissionDenied for a step they may not make, IllegalTransition for a
    step the lifecycle does not allow. Cancelling has its own command.

    ``courier`` carries the order from OUT_FOR_DELIVERY on (default: the one it has, or
    the least busy). The row stays locked to the end of the transaction, so two callers
    moving the same order at once cannot both succeed from the same status."""
    with transaction.atomic():
        order = _locked(by, order_id)  # first: an order they may not see is a 404, whatever `to`
        if to is None:
            target = events.next_status(order.status)
        else:
            try:
                target = OrderStatus(to)
            except ValueError:
                raise OrderError(f"unknown status {to!r}", field="status") from None
            if target is OrderStatus.CANCELLED:
                raise OrderError("use the cancel endpoint", field="status")
        _check_move(by, order, target)
        return _move(order, target, actor=_actor(by, via), courier=courier, at=at)


def cancel_order(
    order_id: int, *, by: policy.Actor, via: str = "", at: datetime | None = None
) -> Order:
    """Cancel an order for ``by`` (its customer, its restaurant's staff or an operator:
    :func:`tracker.orders.policy.can_cancel`), only before it is out for delivery."""
    with transaction.atomic():
        order = _locked(by, order_id)
        _check_move(by, order, OrderStatus.CANCELLED)
        return _move(order, OrderStatus.CANCELLED, actor=_actor(by, via), courier=None, at=at)


def _pick_courier() -> Courier:
    """The active courier with the fewest orders in transit."""
    courier = (
        Courier.objects.filter(is_active=True)
        .annotate(
            busy=Count(
                "orders", filter=Q(orders__status__in=[s.value for s in IN_TRANSIT_STATUSES])
            )
        )
        .order_by("busy", "id")
        .first()
    )
    if courier is None:
        raise OrderError("no active courier is available", field="courier")
    return courier
