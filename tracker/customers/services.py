"""Writes to a customer's delivery addresses.

Two invariants live here: a customer has at most one default address, and at most
``CUSTOMER_MAX_ADDRESSES`` addresses (:class:`TooManyAddresses`). Setting
``is_default`` makes an address the only default, and deleting the default makes the
oldest remaining address the default, so a customer with addresses always has one to
order to. The API and the address page both write through these functions.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from tracker.customers.models import Address, Customer


def _only_default(address: Address) -> None:
    if address.is_default:
        address.customer.addresses.exclude(pk=address.pk).update(is_default=False)


class TooManyAddresses(Exception):
    """The customer already has ``CUSTOMER_MAX_ADDRESSES`` addresses."""

    field = "non_field_errors"


@transaction.atomic
def add_address(customer: Customer, **fields: Any) -> Address:
    """A new delivery address of ``customer``'s (the acting customer: never another's);
    :class:`TooManyAddresses` when they have the most allowed."""
    Customer.objects.select_for_update().filter(pk=customer.pk).first()  # one add at a time
    limit = settings.CUSTOMER_MAX_ADDRESSES
    if customer.addresses.count() >= limit:
        raise TooManyAddresses(f"A customer may keep at most {limit} addresses; delete one first.")
    address = customer.addresses.create(**fields)
    _only_default(address)
    return address


@transaction.atomic
def change_address(address: Address, **fields: Any) -> Address:
    for name, value in fields.items():
        setattr(address, name, value)
    address.save()
    _only_default(address)
    return address


@transaction.atomic
def delete_address(address: Address) -> None:
    customer = address.customer
    address.delete()
    if address.is_default:
        heir = customer.addresses.order_by("id").first()
        if heir is not None:
            heir.is_default = True
            heir.save(update_fields=["is_default"])
