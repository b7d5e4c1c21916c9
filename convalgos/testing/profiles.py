"""Hypothesis profiles for the kit: thorough for users, quick for this project's own test run.

- ``convalgos`` (the default): 100 layers per pass. A user's check, or a CI job of theirs.
- ``convalgos-quick``: 12 layers per pass. This project checks its eleven built-in algorithms on every test run,
  32 passes in all, and must stay within its time budget.
- ``convalgos-thorough``: 1000 layers per pass, for a night's run.

Pick one with ``check_algorithm(..., settings="convalgos-quick")``, ``python -m convalgos.check
--profile convalgos-quick``, or the environment variable ``CONVALGOS_TESTING_PROFILE``. ``max_examples``
overrides the profile's count. Every profile has no deadline (a first call may compile a Numba kernel), no
example database (a check leaves no files behind), and reports one failure per check, shrunk.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, Verbosity, settings

DEFAULT_PROFILE = "convalgos"

settings.register_profile(
    "convalgos", max_examples=100, deadline=None, database=None, report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))      # no "explain" phase: slow
settings.register_profile("convalgos-quick", parent=settings.get_profile("convalgos"), max_examples=12)
settings.register_profile("convalgos-thorough", parent=settings.get_profile("convalgos"), max_examples=1000)

PROFILES = ("convalgos", "convalgos-quick", "convalgos-thorough")


def kit_settings(base=None, max_examples: int | None = None) -> settings:
    """The hypothesis settings of one check: ``base`` (a profile name or a ``settings``; default the
    ``CONVALGOS_TESTING_PROFILE`` environment variable, else "convalgos") with ``max_examples`` if given."""
    if base is None:
        base = os.environ.get("CONVALGOS_TESTING_PROFILE", DEFAULT_PROFILE)
    if isinstance(base, str):
        base = settings.get_profile(base)
    count = {} if max_examples is None else {"max_examples": max_examples}
    return settings(base, report_multiple_bugs=False, **count)       # the kit shrinks one failure at a time
