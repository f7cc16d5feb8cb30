"""Writes to a customer's delivery addresses.

One invariant lives here: a customer has at most one default address. Setting
``is_default`` makes an address the only default, and deleting the default makes the
oldest remaining address the default, so a customer with addresses always has one to
order to. The API and the address page both write through these functions.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from tracker.customers.models import Address, Customer


def _only_default(address: Address) -> None:
    if address.is_default:
        address.customer.addresses.exclude(pk=address.pk).update(is_default=False)


@transaction.atomic
def add_address(customer: Customer, **fields: Any) -> Address:
    """A new delivery address of ``customer``'s (the acting customer: never another's)."""
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
