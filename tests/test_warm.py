"""``convalgos.warm`` (the kernels compiled ahead, over the cores) and the read-only operands that keep each
kernel to one signature per dtype."""
import numpy as np
import numba

import convalgos
from convalgos import ConvParams, warm


def test_every_family_goes_to_exactly_one_worker_and_the_load_is_balanced():
    for processes in (1, 2, 3, 16):
        jobs = warm.assign(processes)
        assert sorted(f for job in jobs for f in job) == sorted(warm.FAMILIES)
        assert len(jobs) == min(processes, len(warm.FAMILIES)) and all(jobs)
    loads = sorted(sum(map(warm.SECONDS.get, job)) for job in warm.assign(2))
    assert loads[1] - loads[0] <= max(warm.SECONDS.values())


def test_the_families_cover_every_builtin_cpu_algorithm_once():
    names = [n for family in warm.FAMILIES.values() for n in family]
    assert sorted(names) == sorted(convalgos.ALGORITHMS) and set(warm.SECONDS) == set(warm.FAMILIES)


def test_cold_means_no_cache_index_yet(tmp_path, monkeypatch):
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))
    assert warm.cold()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "kernels.f-1.py311.nbi").write_bytes(b"")
    assert not warm.cold()


def test_a_family_warms_by_running_every_pass_it_implements():
    runs = warm.warm_family("fft_im2col")
    ops = [op for n in warm.FAMILIES["fft_im2col"] for op in convalgos.PASSES if convalgos.ALGORITHMS[n].implements(op)]
    assert runs >= len(ops) * len(warm.DTYPES)


class Spy(convalgos.Algorithm):
    """Records whether its operands could be written."""
    name, backend, deterministic = "spy", "cpu", True
    tolerance = {"float16": 1e-2, "float32": 1e-5, "float64": 1e-12}

    def _supports(self, p, op):
        return convalgos.Support(True)

    def forward(self, x, w, p, out):
        self.writeable = (x.flags.writeable, w.flags.writeable)
        out[...] = 0


def test_a_cpu_algorithm_gets_read_only_operands_and_the_callers_stay_writable():
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    p = ConvParams.from_arrays(x, w)
    spy = Spy()
    convalgos.run(spy, "forward", x, w, p, np.empty(p.out_shape, np.float32))
    assert spy.writeable == (False, False) and x.flags.writeable and w.flags.writeable
