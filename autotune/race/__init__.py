"""The race of one key's candidates, in small files: ``rounds.py`` (the interleaved race), ``contention.py``
(how long the process's threads waited for a CPU)."""
from .rounds import Race

__all__ = ["Race"]
