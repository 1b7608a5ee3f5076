"""kernels/rows_fused.cu's packed warp reduction (welford_packed_tree, behind welford_packed_rows4 and the counted
form's two passes over the same tree) moves torch's merges between lanes. This runs the kernel's own source text of
that function on a 32-lane model of a warp (each lane's state the tree of merges that made it; CUDA's shuffle
semantics) and checks that lane 0 ends with exactly the tree torch's four warp reductions and 4-warp tree make, in
torch's (own, received) order. The function's text is translated statement by statement, not copied, so an edited
step, source lane, select or argument order in the kernel fails here before any GPU runs it; the mutation test below
shows that it does."""
import re
from pathlib import Path

import pytest

KERNEL = Path(__file__).resolve().parents[1] / "kernels" / "rows_fused.cu"
LANES = 32


class Vec(list):
    """One value per lane; integer and comparison operators act lane by lane."""

    def _op(self, other, f):
        o = other if isinstance(other, list) else [other] * LANES
        return Vec(f(a, b) for a, b in zip(self, o))

    __ge__ = lambda s, o: s._op(o, lambda a, b: a >= b)  # noqa: E731
    __lt__ = lambda s, o: s._op(o, lambda a, b: a < b)  # noqa: E731
    __rshift__ = lambda s, o: s._op(o, lambda a, b: a >> b)  # noqa: E731
    __and__ = lambda s, o: s._op(o, lambda a, b: a & b)  # noqa: E731
    __add__ = lambda s, o: s._op(o, lambda a, b: a + b)  # noqa: E731
    __mul__ = lambda s, o: s._op(o, lambda a, b: a * b)  # noqa: E731


def welford_merge(own, received):
    return Vec(("merge", a, b) for a, b in zip(own, received))


def shfl_down_state(v, delta, width=32):
    """__shfl_down_sync: from lane + delta within the lane's segment of `width`, else the lane's own value."""
    return Vec(v[l + delta] if (l % width) + delta < width else v[l] for l in range(LANES))


def shfl_up_state(v, delta, width=32):
    return Vec(v[l - delta] if (l % width) >= delta else v[l] for l in range(LANES))


def shfl_state(v, src, width=32):
    """__shfl_sync: from lane src (per lane) of the lane's own segment."""
    src = src if isinstance(src, list) else [src] * LANES
    return Vec(v[(l // width) * width + s % width] for l, s in zip(range(LANES), src))


def sel(cond, a, b):
    return Vec(x if c else y for c, x, y in zip(cond, a, b))


def kernel_body(source: str) -> str:
    body = source[source.index("welford_packed_tree(S (&q)[4]"):]
    return body[body.index("{") + 1:body.index("\n}\n")]


def translate(body: str) -> str:
    """The function's statements as Python on Vecs: declarations lose their types (comma-separated ones split),
    ternaries become sel(), the two loop forms become Python loops, `return x` sets `result`."""
    out = []
    for raw in body.split("\n"):
        line = raw.split("//")[0].strip()
        if not line or line.startswith("#pragma"):
            continue
        assert line.endswith(";"), f"a statement this translation does not know: {line!r}"
        line = line[:-1]
        loop = ""
        m = re.fullmatch(r"for \(int (\w+) = 0; \1 < (\d+); \+\+\1\) (.*)", line)
        if m:
            loop, line = f"for {m[1]} in range({m[2]}): ", m[3]
        m = re.fullmatch(r"for \(int (\w+) = (\d+); \1 > 0; \1 >>= 1\) (.*)", line)
        if m:
            steps, k = [], int(m[2])
            while k > 0:
                steps.append(k)
                k >>= 1
            loop, line = f"for {m[1]} in {tuple(steps)}: ", m[3]
        line = re.sub(r"^(const )?(bool|int|S) ", "", line)
        if line.startswith("return "):
            line = "result = " + line[len("return "):]
        parts = re.split(r",\s+(?=\w+ = )", line)  # `a = x, b = y`: one declaration each
        for part in parts:
            part = re.sub(r"(\w+(?: [<>]=? \d+)?) \? (\w+(?:\[\d\])?) : (\w+(?:\[\d\])?)", r"sel(\1, \2, \3)", part)
            out.append(loop + part)
    return "\n".join(out)


def run_kernel_text(body: str, chains):
    scope = {"merge": welford_merge, "shfl_down_state": shfl_down_state, "shfl_up_state": shfl_up_state,
             "shfl_state": shfl_state, "sel": sel, "q": [Vec(c) for c in chains], "lane": Vec(range(LANES))}
    exec(translate(body), scope)  # noqa: S102 - the repository's own kernel text, translated above
    return scope["result"][0]


def torch_order(chains):
    """torch: each warp v shuffles down by 16..1 (merge(own, received)); then 2->0, 3->1, 1->0."""
    warps = []
    for v in range(4):
        s = Vec(chains[v])
        for offset in (16, 8, 4, 2, 1):
            s = welford_merge(s, shfl_down_state(s, offset))
        warps.append(s[0])
    return ("merge", ("merge", warps[0], warps[2]), ("merge", warps[1], warps[3]))


CHAINS = [[f"t{l + 32 * v}" for l in range(LANES)] for v in range(4)]


def test_the_kernels_packed_reduction_makes_torchs_tree_on_lane_zero():
    assert run_kernel_text(kernel_body(KERNEL.read_text()), CHAINS) == torch_order(CHAINS)


@pytest.mark.parametrize("edit", [
    ("shfl_down_state(h0, 8, 16)", "shfl_down_state(h0, 4, 16)"),      # a step (its width only reaches lanes
                                                                       # whose results are never read)
    ("upper ? up1 : q[0]", "upper ? up1 : q[2]"),                      # a select
    ("lane >= 16", "lane >= 8"),                                       # the halves' boundary
    ("(seg & 1) * 16", "(seg & 1) * 8"),                               # a source lane
    ("seg < 2 ? from0 : from1", "seg < 2 ? from1 : from0"),            # which half feeds which eighths
    ("e = merge(e, shfl_down_state(e, offset, 8))",
     "e = merge(shfl_down_state(e, offset, 8), e)"),                   # (own, received) swapped
    ("h1 = merge(h1, shfl_down_state(h1, 8, 16))",
     "h1 = merge(h1, shfl_down_state(h0, 8, 16))"),                    # the wrong state shuffled
])
def test_an_edited_kernel_fails_the_check(edit):
    body = kernel_body(KERNEL.read_text())
    assert edit[0] in body, f"the kernel no longer has {edit[0]!r}: update this mutation"
    assert run_kernel_text(body.replace(edit[0], edit[1], 1), CHAINS) != torch_order(CHAINS)
