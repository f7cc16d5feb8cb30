from django.apps import AppConfig


class SimulatorConfig(AppConfig):
    name = "tracker.simulator"

    def ready(self) -> None:
        from tracker.simulator import checks  # noqa: F401 - registers the system check
