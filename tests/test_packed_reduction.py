"""kernels/rows_fused.cu's packed warp reduction (welford_packed_rows4) moves torch's merges between lanes: this
replays its shuffles on symbolic states (each state the tree of merges that made it) and checks that lane 0 ends
with exactly the tree torch's four warp reductions and 4-warp tree make, in torch's (own, received) order.
A wrong source lane, width or order changes the tree, so the check fails before any GPU runs it."""
import re
from pathlib import Path

KERNEL = Path(__file__).resolve().parents[1] / "kernels" / "rows_fused.cu"


def merge(own, received):
    return ("merge", own, received)


def shfl(vals, src_of, width=32):
    """__shfl_sync: lane l reads lane (l's segment base + src_of(l) % width)."""
    return [vals[(l // width) * width + src_of(l) % width] for l in range(32)]


def shfl_down(vals, delta, width):
    return [vals[l + delta] if (l % width) + delta < width else vals[l] for l in range(32)]


def shfl_up(vals, delta):
    return [vals[l - delta] if l >= delta else vals[l] for l in range(32)]


def torch_order(chains):
    """torch: each warp v shuffles down by 16..1 (merge(own, received)); then 2->0, 3->1, 1->0."""
    warps = []
    for v in range(4):
        s = list(chains[v])
        for offset in (16, 8, 4, 2, 1):
            other = shfl_down(s, offset, 32)
            s = [merge(s[l], other[l]) for l in range(32)]
        warps.append(s[0])
    return merge(merge(warps[0], warps[2]), merge(warps[1], warps[3]))


def packed(chains):
    """welford_packed_rows4, step by step as written in the kernel."""
    q = [list(c) for c in chains]
    for v in range(4):
        other = shfl_down(q[v], 16, 32)
        q[v] = [merge(q[v][l], other[l]) for l in range(32)]
    up1, up3 = shfl_up(q[1], 16), shfl_up(q[3], 16)
    h0 = [up1[l] if l >= 16 else q[0][l] for l in range(32)]
    h1 = [up3[l] if l >= 16 else q[2][l] for l in range(32)]
    o0, o1 = shfl_down(h0, 8, 16), shfl_down(h1, 8, 16)
    h0 = [merge(h0[l], o0[l]) for l in range(32)]
    h1 = [merge(h1[l], o1[l]) for l in range(32)]
    src = lambda l: (l & 7) + ((l >> 3) & 1) * 16  # noqa: E731
    f0, f1 = shfl(h0, src), shfl(h1, src)
    e = [f0[l] if (l >> 3) < 2 else f1[l] for l in range(32)]
    for offset in (4, 2, 1):
        other = shfl_down(e, offset, 8)
        e = [merge(e[l], other[l]) for l in range(32)]
    other = shfl_down(e, 16, 32)
    e = [merge(e[l], other[l]) for l in range(32)]
    other = shfl_down(e, 8, 32)
    return merge(e[0], other[0])


def test_packed_lane_zero_is_torchs_tree():
    chains = [[f"t{l + 32 * v}" for l in range(32)] for v in range(4)]
    assert packed(chains) == torch_order(chains)


def test_a_wrong_source_lane_changes_the_tree():
    chains = [[f"t{l + 32 * v}" for l in range(32)] for v in range(4)]
    swapped = [chains[1], chains[0], chains[2], chains[3]]
    assert packed(swapped) != torch_order(chains)


def test_the_kernel_is_written_as_replayed_here():
    """The replay above follows the kernel's source: the same shuffle calls with the same deltas and widths."""
    src = KERNEL.read_text()
    body = src[src.index("welford_packed_rows4(WelfordLN"):]
    body = body[:body.index("\n}\n")]
    calls = re.findall(r"shfl_(down|up)?_?state\((\w+(?:\[\w\])?), ([\w ]+)(?:, (\d+))?(?:, (\d+))?\)", body)
    got = [(kind or "idx", arg.strip(), width) for kind, _, arg, width, _ in calls]
    assert got == [("down", "16", "32"), ("up", "16", ""), ("up", "16", ""), ("down", "8", "16"),
                   ("down", "8", "16"), ("idx", "src", ""), ("idx", "src", ""), ("down", "offset", "8"),
                   ("down", "16", "32"), ("down", "8", "32")], got
    assert "src = (lane & 7) + (seg & 1) * 16" in body and "seg < 2 ? from0 : from1" in body
