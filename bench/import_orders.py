"""Scratch benchmark (issue 20): one case timed in fresh processes, one per import order, rounds interleaved.

    python bench/import_orders.py --case resnet20:32:32 --rounds 5
    python bench/import_orders.py --case resnet20:32:32:train --orders numpy,torch,convalgos --passes 11

A case is ``model:batch:size`` (eval forward, benchmark mode, tuned first) or ``model:batch:size:train`` (one
training step, SGD, the weights reset untimed before each). Each round starts one fresh process per import order
(``numpy``: ``import numpy`` first; ``torch``: ``import torch`` first; ``convalgos``: convalgos first), in an
order rotated round to round. Each process times ``--passes`` autotuned passes and as many forced to ``direct``,
interleaved, and reports their medians; ``--torch-ops`` puts a torch BatchNorm2d + ReLU on a (64, 16, 32, 32)
tensor before each pass (what the torch bridge will do between convs). The table gives, per order, the median
over rounds of each process's median, the spread (min-max over rounds), and the ratios autotuned /
convalgos-first and autotuned / forced direct.

Run as a script (not ``python -m bench...``: the package's __init__ imports convalgos first). Only the standard
library is imported at the top, so the child's first import is the order's.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Run as a script, Python puts bench/ first on the path, where bench/autotune.py would shadow the package.
if sys.path and os.path.abspath(sys.path[0]) == os.path.join(ROOT, "bench"):
    sys.path.pop(0)
FIRST = {"numpy": "import numpy", "torch": "import torch", "convalgos": "import convalgos"}


def child(order, case, passes, torch_ops):
    exec(FIRST[order], {})
    import numpy as np
    import autotune
    from autotune import measure, models, nn, optim
    from convalgos import ALGORITHMS
    name, batch, size, *mode = case.split(":")
    batch, size = int(batch), int(size)
    rng = np.random.default_rng(0)
    between = (lambda: None)
    if torch_ops:
        import torch
        bn, t = torch.nn.BatchNorm2d(16).eval(), torch.from_numpy(rng.standard_normal((64, 16, 32, 32),
                                                                                        dtype=np.float32))
        between = (lambda: torch.relu_(bn(t)))
    if mode == ["train"]:
        calls = {}
        for label, tuner in (("autotuned", autotune.Tuner(benchmark=True)),
                             ("direct", autotune.Tuner({"direct": ALGORITHMS["direct"]}))):
            net = models.get_model(name, tuner=tuner).train()
            state = {k: np.array(v) for k, v in net.state_dict().items()}
            x = rng.standard_normal((batch,) + tuple(net.input_shape[:1]) + (size, size)).astype(np.float32)
            labels = rng.integers(0, 10, batch)
            opt, loss_fn = optim.SGD(net, lr=0.01, momentum=0.9), nn.CrossEntropyLoss()

            def step(net=net, x=x, labels=labels, opt=opt, loss_fn=loss_fn, state=state):
                net.load_state_dict(state)           # untimed below: the timer wraps only the step
                between()
                t0 = time.perf_counter()
                loss_fn(net(x), labels)
                net.zero_grad()
                net.backward(loss_fn.backward())
                opt.step()
                return time.perf_counter() - t0
            calls[label] = step
    else:
        net = models.get_model(name).eval()
        x = rng.standard_normal((batch, net.input_shape[0], size, size)).astype(np.float32)
        autotune.benchmark = True

        def timed(fn):
            def call():
                between()
                t0 = time.perf_counter()
                fn()
                return time.perf_counter() - t0
            return call

        def forced():
            with nn.use_algorithm(net, "direct"):
                net(x)
        calls = {"autotuned": timed(lambda: net(x)), "direct": timed(forced)}
    for fn in calls.values():                   # tunes (autotuned), compiles / warms (both)
        fn(), fn()
    samples = {k: [] for k in calls}
    names = list(calls)
    for i in range(passes):
        for k in names[i % 2:] + names[:i % 2]:
            samples[k].append(calls[k]())
    print(json.dumps({k: statistics.median(v) for k, v in samples.items()}))


def run_child(run, args):
    """One fresh process: ``run`` is an import order, or ``tree:order`` for a tree named in --trees."""
    tree, _, order = run.rpartition(":")
    root = args.trees.get(tree, ROOT)
    cmd = [sys.executable, os.path.join(root, "bench", "import_orders.py"), "--child", order, "--case", args.case,
           "--passes", str(args.passes)] + (["--torch-ops"] if args.torch_ops else [])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for var in args.unset:
        env.pop(var, None)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise RuntimeError(f"{run}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="resnet20:32:32")
    ap.add_argument("--orders", default="numpy,torch,convalgos")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--passes", type=int, default=11)
    ap.add_argument("--torch-ops", action="store_true")
    ap.add_argument("--unset", default="OPENBLAS_THREAD_TIMEOUT,OMP_WAIT_POLICY,GOMP_SPINCOUNT",
                    help="environment variables removed in the children (default: the ones convalgos sets)")
    ap.add_argument("--trees", default="", help="name=path,...: other checkouts to run beside this one; then "
                                                "--orders lists name:order (this tree: just the order)")
    ap.add_argument("--child", choices=list(FIRST))
    args = ap.parse_args()
    args.unset = [v for v in args.unset.split(",") if v]
    args.trees = dict(t.split("=", 1) for t in args.trees.split(",") if t)
    if args.child:
        return child(args.child, args.case, args.passes, args.torch_ops)
    orders = args.orders.split(",")
    got = {o: [] for o in orders}
    for r in range(args.rounds):
        for o in orders[r % len(orders):] + orders[:r % len(orders)]:
            got[o].append(run_child(o, args))
        print(f"round {r + 1}: " + "  ".join(f"{o} {got[o][-1]['autotuned'] * 1e3:.1f}/"
                                             f"{got[o][-1]['direct'] * 1e3:.1f}" for o in orders), flush=True)
    def base(run):              # the same tree's convalgos-first median (none measured: the last order's)
        tree = run.rpartition(":")[0]
        first = got.get(f"{tree}:convalgos" if tree else "convalgos", got[orders[-1]])
        return statistics.median(g["autotuned"] for g in first) * 1e3
    print(f"\n{args.case}{' +torch ops' if args.torch_ops else ''}: ms, median over {args.rounds} processes of "
          f"each one's median of {args.passes} passes (min-max)")
    print("| first import | autotuned | forced direct | autotuned / convalgos-first | autotuned / direct |")
    print("|---|---|---|---|---|")
    for o in orders:
        a = [g["autotuned"] * 1e3 for g in got[o]]
        d = [g["direct"] * 1e3 for g in got[o]]
        ratio = statistics.median(x / y for x, y in zip(a, d))
        print(f"| {o} | {statistics.median(a):.1f} ({min(a):.1f}-{max(a):.1f}) | {statistics.median(d):.1f} "
              f"({min(d):.1f}-{max(d):.1f}) | {statistics.median(a) / base(o):.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
