"""The race of one key's candidates, one job per file:

- ``clock.py``: one sample as a step pays for a call (the worker pool awake, the call timed, the readings);
- ``contention.py``: how long the process's threads waited for a CPU (``/proc``, ``getrusage``);
- ``rounds.py``: the interleaved rounds, retakes of runs that waited;
- ``leaving.py``: when a candidate leaves the race (abandoned, settled, done);
- ``judge.py``: the top two decided on paired ratios with an interval (decided, tie, close call);
- ``blocks.py``: beside a neighbour that stays, blocks of calls raced on their mean cost per call;
- ``host_or_gpu.py``: which time a run costs the step (the GPU's host or GPU time), and which made the choice;
- ``provisional.py``: when a choice rests on runs that waited;
- ``quiet.py``: noticing the machine quiet again, so provisional choices are raced again.
"""
from .rounds import Race

__all__ = ["Race"]
