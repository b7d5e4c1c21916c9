"""The fleet's one channel: JSON documents all-gathered over a gloo process group of its own, with a timeout.

- JSON, never pickle (``torch.distributed.all_gather_object`` pickles, and unpickling runs code): a document
  is encoded to UTF-8 bytes and sent as a ``uint8`` CPU tensor, in two all-gathers: the lengths, then the
  bytes padded to the longest.
- Its own group, made by ``torch.distributed.new_group(backend="gloo", timeout=...)``: every collective on it
  (the group's creation included) raises after ``timeout`` seconds instead of waiting for a rank that never
  comes; gloo carries CPU tensors whatever the default group's backend (NCCL carries only CUDA tensors); and
  the fleet's traffic never interleaves with DistributedDataParallel's gradient all-reduces on the default
  group. After a failed or timed-out collective gloo closes the group's connections ("pair closure"), so the
  channel is then ``broken`` for good, and says why.
- ``node_id()``: which machine a rank runs on, so that ranks sharing cores take turns at timing: the kernel's
  boot id (the same for every container on one host, different on another host), else the host name.
"""
from __future__ import annotations

import datetime
import json
import socket
import time

import torch
import torch.distributed as dist


class FleetError(RuntimeError):
    """A fleet cannot be made here: no process group, or no backend that carries its documents."""


class FleetBroken(RuntimeError):
    """A collective of the fleet failed or timed out; the fleet is no longer used."""


def node_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return "boot " + f.read().strip()
    except OSError:
        return "host " + socket.gethostname()


def require_group() -> None:
    """FleetError unless a default process group is initialised and a gloo group can be made beside it."""
    if not dist.is_available():
        raise FleetError("autotune.fleet needs torch.distributed, which this torch build lacks "
                         "(torch.distributed.is_available() is False); each rank can tune alone: "
                         "autotune.fleet.join(..., fallback=True)")
    if not dist.is_initialized():
        raise FleetError("autotune.fleet needs an initialised process group: call "
                         "torch.distributed.init_process_group(...) on every rank first (torchrun or "
                         "torch.multiprocessing.spawn start them); or let each rank tune alone: "
                         "autotune.fleet.join(..., fallback=True)")
    if not dist.is_gloo_available():
        raise FleetError(f"autotune.fleet sends its entries as CPU tensors over a gloo group, and this torch has "
                         f"no gloo backend (the default group's backend {dist.get_backend()!r} is not used for "
                         f"them: NCCL carries CUDA tensors only); each rank can tune alone: "
                         f"autotune.fleet.join(..., fallback=True)")


class Channel:
    """All-gathers of JSON documents among every rank of the default group, each bounded by ``timeout`` s.
    ``gathers`` and ``seconds``: how many this rank took part in, and the seconds it spent in them (waiting for
    the others included)."""

    def __init__(self, timeout: float):
        require_group()
        self.timeout = timeout
        self.broken = None                 # why the channel broke, once it has
        self.gathers, self.seconds = 0, 0.0
        try:
            self.group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout))
        except Exception as e:  # noqa: BLE001 - a rank that never came, or a store that failed
            raise FleetError(f"autotune.fleet: making its gloo group failed ({type(e).__name__}: {e}); every "
                             f"rank must create the fleet, within timeout={timeout} s of the others") from e
        self.rank, self.size = dist.get_rank(self.group), dist.get_world_size(self.group)

    def gather(self, document) -> list:
        """Every rank's ``document`` (JSON-serialisable), in rank order; FleetBroken when a collective fails
        (a rank absent for ``timeout`` s, a closed connection), now or at any earlier call."""
        if self.broken:
            raise FleetBroken(self.broken)
        data = json.dumps(document).encode()
        began = time.perf_counter()
        try:
            sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
            dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64), group=self.group)
            longest = max(int(s) for s in sizes)
            mine = torch.zeros(longest, dtype=torch.uint8)
            mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            chunks = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.size)]
            dist.all_gather(chunks, mine, group=self.group)
        except Exception as e:  # noqa: BLE001 - gloo's timeouts and closed connections are RuntimeErrors
            self.broken = (f"a fleet collective failed on rank {self.rank} ({type(e).__name__}: "
                           f"{str(e).splitlines()[0][:300]}); timeout={self.timeout} s")
            raise FleetBroken(self.broken) from e
        finally:
            self.gathers, self.seconds = self.gathers + 1, self.seconds + time.perf_counter() - began
        return [json.loads(bytes(c[:int(s)].numpy())) for c, s in zip(chunks, sizes)]
