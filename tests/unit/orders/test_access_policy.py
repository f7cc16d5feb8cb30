"""Who may see what is decided in one place: :mod:`tracker.orders.policy`.

The channels (REST views and serializers, the pages, the WebSocket consumers, the admin)
ask the policy; none of them looks at what makes someone an order's customer, courier,
restaurant staff or an operator, queries orders itself, or turns a policy answer into a
decision of its own (``restaurant_id in policy.staff_restaurant_ids(user)``). The scan
below reads their source; the same scan applied to the decisions that used to live in
the channels, and to the policy itself, must find them, so it cannot pass by seeing
nothing.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: The channels' modules: everything under these, except what is named in EXEMPT.
CHANNEL_SOURCES = ("api", "frontend", "tracker/live", "tracker/orders/admin.py")
EXEMPT = {
    # Says *whose* sockets to re-check when a restaurant's staff changes (it reads the
    # membership being changed); whether they still have access is the policy's answer.
    "tracker/live/signals.py",
}

#: What makes a user someone to an order or a restaurant (only the policy reads these).
MEMBERSHIP_ATTRIBUTES = {"is_staff", "is_superuser", "restaurants", "staff"}
#: ORM lookups through that membership.
MEMBERSHIP_LOOKUPS = ("staff", "restaurants", "customer__user", "courier__user")
#: Models whose rows are access-controlled: reached only through the policy, the
#: services and the read model. Restaurants are public (the menu), except through
#: the membership lookups above.
GUARDED_MODELS = {"Order", "OrderItem", "OrderStatusChange", "Courier", "Customer"}


def _policy_call(node: ast.AST) -> bool:
    """``policy.<anything>(...)``, or a policy function imported by name."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "policy"
    )


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(
        _policy_call(n) or (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(node)
    )


def decisions_in(source: str) -> list[str]:
    """Each place ``source`` decides access itself, as "line: what"."""
    tree = ast.parse(textwrap.dedent(source))
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute):
            if node.attr in MEMBERSHIP_ATTRIBUTES:
                found.append(f"{line}: reads .{node.attr}")
            if (
                node.attr == "objects"
                and isinstance(node.value, ast.Name)
                and node.value.id in GUARDED_MODELS
            ):
                found.append(f"{line}: queries {node.value.id} itself")
        elif isinstance(node, ast.keyword) and any(
            part in (node.arg or "") for part in MEMBERSHIP_LOOKUPS
        ):
            found.append(f"{line}: looks up {node.arg}")
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        # Names bound to a policy answer in this function (``mine = policy.staff_...``).
        bound = {
            target.id
            for assign in ast.walk(function)
            if isinstance(assign, ast.Assign) and _policy_call(assign.value)
            for target in assign.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("filter", "exclude", "get")
                and any(_mentions(a, bound) for a in [*node.args, *node.keywords])
            ):
                found.append(f"{node.lineno}: filters by a policy answer itself")
        for compare in ast.walk(function):
            if not isinstance(compare, ast.Compare):
                continue
            if all(isinstance(op, ast.Is | ast.IsNot) for op in compare.ops):
                continue  # "has the role at all": policy.customer_of(user) is None
            operands = [compare.left, *compare.comparators]
            if any(_mentions(o, bound) for o in operands):
                found.append(f"{compare.lineno}: decides on a policy answer itself")
    return found


def _channel_files() -> list[Path]:
    files = []
    for source in CHANNEL_SOURCES:
        path = ROOT / source
        candidates = [path] if path.is_file() else sorted(path.rglob("*.py"))
        for file in candidates:
            relative = str(file.relative_to(ROOT))
            if "node_modules" in file.parts or "migrations" in file.parts:
                continue
            if relative not in EXEMPT:
                files.append(file)
    return files


def test_no_channel_decides_access_itself():
    files = _channel_files()
    assert len(files) > 20  # api, frontend, the consumers and the admin were all read
    found = {
        str(file.relative_to(ROOT)): decisions
        for file in files
        if (decisions := decisions_in(file.read_text()))
    }
    assert found == {}, "ask tracker.orders.policy instead"


#: Decisions the channels made before they asked the policy (REST, sockets, pages).
FORMER_DECISIONS = {
    "REST: the analytics' restaurant": """
        def restaurant_scope(request, restaurant_id):
            if policy.is_operator(request.user):
                return restaurant_id
            mine = policy.staff_restaurant_ids(request.user)
            if restaurant_id not in mine:
                raise PermissionDenied("Not your restaurant.")
            return restaurant_id
    """,
    "socket: the kitchen board": """
        def _may_run(user, restaurant_id):
            if policy.is_operator(user):
                if Restaurant.objects.filter(pk=restaurant_id).exists():
                    return
            elif restaurant_id in policy.staff_restaurant_ids(user):
                return
            raise PermissionError("No such restaurant.")
    """,
    "socket: an order": """
        def still_authorised(self, user):
            if not Order.objects.filter(customer__user=user, pk=self.order_id).exists():
                raise PermissionError("No such order.")
    """,
    "socket: a customer's list": """
        def still_authorised(self, user):
            customer = policy.customer_of(user)
            if customer is None or customer.pk != self.customer_id:
                raise PermissionError("Only customers have an order list to follow.")
    """,
    "page: the restaurant picker": """
        def _restaurant_choice(request):
            ids = policy.staff_restaurant_ids(request.user)
            return Restaurant.objects.filter(pk__in=ids).order_by("name", "id")
    """,
    "REST: advance": """
        def post(self, request, pk):
            order = self.get_object()
            if not request.user.is_staff and order.restaurant_id not in mine(request.user):
                raise PermissionDenied()
    """,
}


def test_the_scan_finds_the_decisions_channels_used_to_make():
    missed = [name for name, source in FORMER_DECISIONS.items() if not decisions_in(source)]
    assert missed == []
    # ... and the policy itself, where the decisions live, is full of them.
    assert len(decisions_in((ROOT / "tracker/orders/policy.py").read_text())) >= 5
