"""How a Winograd pass (``cpu.py``) cuts its work, worked out from the layer, the pass and the algorithm's settings
(``chunk_bytes``, ``tiles_per_block``, ``filter_block``): tile rows per chunk of transformed tiles, tile rows
per transform item, filters per filter-transform item, and the scratch each thread keeps for its transforms.
``blocking_of`` memoises the whole answer per layer and settings in the algorithm."""
from __future__ import annotations

from typing import NamedTuple

from numba import get_num_threads

from ..params import ConvParams
from .kernels import block_tiles, filter_block_size
from .kernels import scratch_elements as kernel_scratch


class Blocking(NamedTuple):
    """How a pass cuts its work: threads, tiles per tile row, tile rows per transform item, filters per filter
    transform item, and scratch elements per thread."""
    threads: int
    tiles_w: int
    rows_per_block: int
    filter_block: int
    scratch: int


def rows_per_chunk(alg, p: ConvParams, op: str) -> int:
    """Tile rows per chunk: as many as fit the chunk's tiles in chunk_bytes, balanced over the chunks."""
    tiles_h, tiles_w = alg._tiles(p, op)
    row_bytes = alg.alpha ** 2 * (p.C + p.K) * tiles_w * p.itemsize
    rows = max(1, alg.chunk_bytes // row_bytes)
    n_rows = max(1, p.N * tiles_h)
    chunks = -(-n_rows // rows)
    return -(-n_rows // chunks)


def n_chunks(alg, p: ConvParams, op: str) -> int:
    """How many chunks the pass's tile rows take."""
    return -(-p.N * alg._tiles(p, op)[0] // rows_per_chunk(alg, p, op))


def rows_per_block(alg, p: ConvParams, op: str) -> int:
    """Tile rows per item of a (non-register) transform kernel: tiles_per_block, in whole rows (at least one),
    at most a chunk's."""
    return min(max(1, alg.tiles_per_block // alg._tiles(p, op)[1]), rows_per_chunk(alg, p, op))


def scratch_elements_per_thread(alg, p: ConvParams, op: str, n_threads: int) -> int:
    """Scratch elements per thread: the most any transform kernel of pass ``op`` uses at once."""
    a, m, r = alg.alpha, alg.m, alg.r
    tiles = rows_per_block(alg, p, op) * alg._tiles(p, op)[1]
    filters = filter_block_size(p.K * p.Cg, alg.filter_block, n_threads)

    def tile_kernel(b, a):           # X (b x a) on tiles: a 6 x 6 X by blocks of TB tiles in registers
        if (b, a) == (6, 6):
            return kernel_scratch(6, 6, block_tiles(p.compute_dtype))
        return kernel_scratch(a, b, tiles)

    if op == "backward_filter":      # x tiles by B'^T, dy tiles by G' (alpha x m), the sums S by A'^T (3 x alpha)
        needs = (tile_kernel(a, a), tile_kernel(a, m), kernel_scratch(a, r, filters))
    else:                            # input tiles by B^T, output tiles by A^T (m x alpha), filters by G (alpha x 3)
        needs = (tile_kernel(a, a), kernel_scratch(a, m, tiles), kernel_scratch(r, a, filters))
    return max(needs)


def blocking_of(alg, p: ConvParams, op: str) -> Blocking:
    """How pass ``op`` of ``p`` cuts its work at today's thread count; memoised per layer and settings
    (working it out twice a call cost 4-6 us of Python, +10-20% on a 40 us layer)."""
    n_threads = get_num_threads()
    key = (p, op, n_threads, alg.chunk_bytes, alg.tiles_per_block, alg.filter_block)
    if key not in alg._blockings:
        alg._blockings[key] = Blocking(n_threads, alg._tiles(p, op)[1], rows_per_block(alg, p, op),
                                       filter_block_size(p.K * p.Cg, alg.filter_block, n_threads),
                                       scratch_elements_per_thread(alg, p, op, n_threads))
    return alg._blockings[key]
