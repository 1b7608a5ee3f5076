"""Rows-cluster reference-order LayerNorm: torch's per-row arithmetic (kernels/rows_cluster.cu) with each row held
across the shared memory of a cluster of two CTAs, for rows longer than one SM's ring holds well.

A persistent grid of clusters of 2, one CTA per SM; CTA i of a cluster streams its half of each of the cluster's
rows into its ring by bulk copies and pushes it, torch's 128 chains relayed from CTA 0 to CTA 1 through distributed
shared memory; CTA 1 merges them in torch's trees and sends mean and rstd back; each CTA's output group writes its
half from its ring. x is read from memory once wherever half a row fits the ring (N up to 2 x (slots - 1) chunks of
16 KiB), where rows_staged re-reads the part of a row its one ring cannot hold. The same bits as rows_staged and
torch: each of torch's 128 chains pushes its float4s in order, then torch's warp and 4-warp trees.

The grid is as many clusters as the SMs make (min(rows, SMs // 2)). A GPU whose GPCs cannot hold them all at once
runs the rest as a second wave (correct, slower), and how many a GPU holds depends on its GPCs, not on the SM count
that a dispatch table's wave axis carries: so the rule serves this path only from a table measured at the device's
own SM count (CARRIES = False; labkit.ops.dispatch.rule), never from one carried from another GPU of the arch.
"""
from __future__ import annotations

from labkit.core.device import Device
from labkit.core.launch import Kernel
# rows_staged's launches' shape, reciprocal table length (steps) and reserved KiB: the same 128 chains and block
from labkit.ops.rows_staged import RESERVED_BYTES, RowsStagedLaunches, steps

PATH = "rows_cluster"
KERNELS = ("rows_cluster",)
FUNCTION = "rows_cluster2"
MIN_ARCH = 90            # thread block clusters, distributed shared memory, st.async, bulk copies
CARRIES = False          # its scores hold only at the SM count (and GPC layout) they were measured on
CLUSTER = 2              # CTAs per cluster (kernels/rows_cluster.cu __cluster_dims__)
THREADS = 128            # torch's threads per row: the chain group
OUT_THREADS = 512        # the output group (kernels/rows_cluster.cu kOutWarps warps)
BLOCK = THREADS + OUT_THREADS + 32  # and the producer warp
CHUNK_VECTORS = 1024     # float4s per chunk (kernels/rows_cluster.cu kChunk): 8 per chain
CHUNK_BYTES = 16 * CHUNK_VECTORS
STATS_RING = 4           # kernels/rows_cluster.cu kStatsRing
RELAY_RING = 2           # kRelayRing
# per slot: 2 mbarriers; then 2 mbarriers and a (mean, rstd) pair per statistics entry, 2 mbarriers and 128
# (mean, m2) pairs per relay entry, 2 x 4 warp states
SLOT_BYTES = CHUNK_BYTES + 2 * 8
FIXED_BYTES = STATS_RING * (2 * 8 + 8) + RELAY_RING * (2 * 8 + 8 * THREADS) + 2 * 4 * 3 * 4

def chunks(n: int) -> int:
    return -(-(n // 4) // CHUNK_VECTORS)


def own_chunks(n: int) -> int:
    """Chunks of a row the first CTA of a cluster holds (the most any holds)."""
    return -(-chunks(n) // CLUSTER)


def smem_bytes(n: int, slots: int) -> int:
    """kernels/rows_cluster.cu's dynamic shared memory: the ring and its barriers, the reciprocals, the statistics
    and relay rings, the warp states."""
    return slots * SLOT_BYTES + 16 * steps(n) + FIXED_BYTES


def slots_for(n: int, device: Device) -> int:
    """The deepest ring one block's opt-in shared memory holds beside the reserved KiB."""
    return (device.smem_optin_bytes - RESERVED_BYTES - 16 * steps(n) - FIXED_BYTES) // SLOT_BYTES


def launches(rows: int, n: int, device: Device) -> RowsStagedLaunches:
    """The launch for rows x N on `device` (rows_staged's launches' shape: the same arguments, one launch, the cluster's
    grid), path rows_cluster; ValueError where it cannot run there."""
    if device.arch < MIN_ARCH:
        raise ValueError(f"rows_cluster is built for sm_{MIN_ARCH} and later (thread block clusters), device is "
                         f"{device.arch_name}")
    if device.sm_count < CLUSTER:
        raise ValueError(f"rows_cluster runs clusters of {CLUSTER} CTAs, one per SM; {device.name} has "
                         f"{device.sm_count} SM")
    slots = slots_for(n, device)
    if slots < 2:
        raise ValueError(f"rows_cluster needs a ring of at least 2 chunks of {CHUNK_BYTES} bytes per CTA; "
                         f"{device.name}'s {device.smem_optin_bytes} bytes of shared memory per block hold "
                         f"{max(slots, 0)} at N={n}")
    if own_chunks(n) > slots - 1:  # one slot is always left to the next row's first chunk
        limit = CLUSTER * (slots - 1) * CHUNK_VECTORS * 4
        raise ValueError(f"rows_cluster holds half a row and one more chunk of {CHUNK_BYTES} bytes in a CTA's ring "
                         f"of {slots} (what {device.name}'s {device.smem_optin_bytes} bytes per block hold): N <= "
                         f"{limit}, got N={n} ({own_chunks(n)} chunks a CTA)")
    grid = CLUSTER * min(rows, device.sm_count // CLUSTER)
    return RowsStagedLaunches(rows, n, slots, Kernel("rows_cluster", FUNCTION, (grid,), (BLOCK,),
                                                     smem_bytes(n, slots)), path=PATH)


def rows_cluster_layer_norm(x, weight, bias, eps: float = 1e-5, *, out=None, return_stats: bool = False):
    """LayerNorm over weight's shape with torch's vectorized-path arithmetic, each row across a cluster of 2 CTAs.

    Args and returns as labkit.ops.reference_order.reference_order_layer_norm. Raises ValueError naming the
    violated condition before any launch: an input torch's vectorized path would not take (labkit.ops.eligibility),
    a GPU before sm_90, or a row whose half does not fit a CTA's ring.
    """
    from labkit.ops.launches import run

    return run(launches, x, weight, bias, eps, out, return_stats)
