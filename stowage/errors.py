"""Stowage's exception hierarchy, drawn once so callers know which level to catch::

    StowageError                     anything Stowage raises on purpose
    └── InvalidInput (ValueError)    a user-supplied value is wrong; names field, value, allowed
        ├── QuantityError            a Kubernetes quantity that does not parse or is out of range
        ├── IntentError              a pod label/annotation with a malformed value
        ├── ConfigError              one or more config keys invalid (carries every problem)
        └── WorkloadError            a simulator workload file that does not validate

Every message says where (dotted path), which value, and what is allowed.
"""

from __future__ import annotations

__all__ = ["ConfigError", "IntentError", "InvalidInput", "QuantityError", "StowageError", "WorkloadError"]


class StowageError(Exception):
    """Base of every error Stowage raises deliberately."""


class InvalidInput(StowageError, ValueError):
    """A value given by a user or an API object is not acceptable.

    ``field`` is the dotted path of the value, ``value`` the offending value and
    ``allowed`` a short statement of what would be accepted.
    """

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}: {allowed}, got {value!r}")


class QuantityError(InvalidInput):
    """A Kubernetes resource quantity that cannot be used."""


class IntentError(InvalidInput):
    """A Stowage label or annotation on a pod with a malformed value."""


class ConfigError(StowageError, ValueError):
    """Configuration that failed validation; ``problems`` lists every bad key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid configuration:\n  " + "\n  ".join(self.problems))


class WorkloadError(StowageError, ValueError):
    """A workload file for the simulator that does not validate; ``problems`` lists each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid workload:\n  " + "\n  ".join(self.problems))
