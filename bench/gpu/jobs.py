"""One job of the GPU check in this process (the parent starts each in its own: ``runner.py``):

    python -m bench.gpu.jobs preflight | launch | check ALGO | time [SKIP] | cudnn on|off | net NAME BATCH SIZE
                              | bridge NAME BATCH SIZE

It prints its rows as protocol lines (``common.emit``) and ends with a "done" line; a job that dies prints no
"done", and its exit status and the tail of its stderr say why.
"""
from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    job, args = argv[0], argv[1:]
    from .common import emit
    if job == "preflight":
        from .preflight import run_preflight
        run_preflight()
    elif job == "launch":
        from .launch_routes import run_launch_cost
        run_launch_cost()
    elif job == "check":
        from .check import run_check
        run_check(args[0])
    elif job == "time":
        from .timing import run_time
        run_time(int(args[0]) if args else 0)
    elif job == "cudnn":
        from .timing import run_cudnn
        run_cudnn(args[0] == "on")
    elif job == "net":
        from .nets import run_net
        run_net(args[0], int(args[1]), int(args[2]))
    elif job == "bridge":
        from .bridge import run_bridge
        run_bridge(args[0], int(args[1]), int(args[2]))
    else:
        raise SystemExit(f"unknown job {job!r}")
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
