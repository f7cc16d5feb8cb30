"""``python -m localrun`` (``make run``): migrate, seed, then run every component until Ctrl-C.

The components and their start order are :func:`localrun.components.components`;
:class:`localrun.launch.System` starts, watches and stops them.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localrun", description=__doc__)
    parser.add_argument("--no-simulator", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # The local push service (localrun/pushservice.py) listens on loopback: allowed with
    # debug on only (make run), never in production.
    os.environ.setdefault("WEBPUSH_ALLOW_LOCAL", "true")
    import django

    django.setup()
    from django.core.management import call_command
    from django.urls import reverse

    from localrun.components import components
    from localrun.launch import LaunchError, System
    from localrun.pushservice import demo_customers
    from runtime.conf import var_dir
    from tracker.simulator.seed import DEMO_PASSWORD, OPERATOR_USERNAME

    print("system | migrating the database ...", flush=True)
    call_command("migrate", verbosity=0, interactive=False)
    call_command("simulate", seed_only=True, seed=42)
    names = [c.name for c in components() if not (args.no_simulator and c.name == "simulator")]
    system = System(names)
    supervisor = system.supervisor
    supervisor.stop_on_signals()
    base = system.web_url
    watched = demo_customers()
    first = watched[0] if watched else "customer1"
    ready = (
        "\n"
        "  ============================================================\n"
        "  Ordertrack is ready.\n"
        f"    customer app     {base}/\n"
        f"    operator admin   {base}/admin/   ({OPERATOR_USERNAME} / {DEMO_PASSWORD})\n"
        f"    REST API docs    {base}/api/docs/\n"
        f"    customers        customer1..customer200 / {DEMO_PASSWORD}\n"
        "    watch events     make tail TOPIC=orders_enriched\n"
        f"    live channel     {base}/api/asyncapi/\n"
        f"    notifications    {', '.join(watched) or 'nobody'}: phone subscribed, email on; each\n"
        "                     orders within a minute, then as often as any customer\n"
        f"      watch one      sign in as {first} at {base}{reverse('frontend:my-orders')}\n"
        f"      their pushes   {var_dir() / 'push'}/{first}.jsonl (one per customer)\n"
        f"      their mails    {var_dir() / 'mail'}/*.eml\n"
        "  From now on: a status line per component every few seconds, and every warning\n"
        "  or error; everything else is in var/logs/ (LOG_LEVEL=debug shows it here too).\n"
        "  Ctrl-C stops everything.\n"
        "  ============================================================"
    )
    try:
        system.start(ready_message=ready)
    except LaunchError as exc:  # the supervisor said which component, or Ctrl-C
        return 0 if exc.interrupted else 1
    try:
        while not supervisor.stopping.wait(0.5):  # a timed wait lets signals in
            pass
    finally:
        system.stop()
    return 1 if supervisor.failed.is_set() else 0


if __name__ == "__main__":
    sys.exit(main())
