import pytest

from labkit.studies import bench


def test_summarize_quartiles_and_extremes():
    s = bench.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s == {"median_ms": 3.0, "q25_ms": 2.0, "q75_ms": 4.0, "min_ms": 1.0, "max_ms": 5.0, "n": 5}


def test_summarize_rejects_empty():
    with pytest.raises(ValueError):
        bench.summarize([])


def test_paired_ratios_are_per_round_not_ratio_of_medians():
    # Rounds drift together (a slow round slows both); paired ratios stay at 2, medians would not say so
    # if one method's samples were reordered.
    samples = {"native": [2.0, 4.0, 8.0], "fast": [1.0, 2.0, 4.0]}
    r = bench.paired_ratios(samples, "native")
    assert r["fast"]["per_round"] == [2.0, 2.0, 2.0] and r["native"]["median"] == 1.0
    with pytest.raises(ValueError, match="baseline"):
        bench.paired_ratios(samples, "missing")


class CountingTimer:
    def __init__(self):
        self.calls = []

    def __call__(self, fn, repeats):
        for _ in range(repeats):
            fn()
        self.calls.append(repeats)
        return float(len(self.calls))


def test_protocol_mechanics_warmups_rounds_repeats_and_seeded_order():
    counts = {"a": 0, "b": 0, "c": 0}

    def make(name):
        def fn():
            counts[name] += 1
        return fn

    proto = bench.Protocol(graph=False, warmups=8, rounds=35, repeats=5, order_seed=7)
    rec = bench.time_methods({k: make(k) for k in counts}, proto, baseline="a", timer=CountingTimer())
    assert counts == {k: 8 + 35 * 5 for k in counts}
    assert all(len(v) == 35 for v in rec.samples_ms.values())
    assert len(rec.order) == 35 and all(sorted(o) == ["a", "b", "c"] for o in rec.order)
    assert len({tuple(o) for o in rec.order}) > 1  # the order really is shuffled
    rec2 = bench.time_methods({k: make(k) for k in counts}, proto, baseline="a", timer=CountingTimer())
    assert rec2.order == rec.order  # and reproducible from the seed
    assert set(rec.ratio_vs_baseline) == {"a", "b", "c"}


def test_host_timer_measures_something():
    ms = bench.HostTimer()(lambda: sum(range(1000)), 3)
    assert ms > 0


def test_protocol_validation():
    with pytest.raises(ValueError, match="rounds"):
        bench.Protocol(rounds=0)
    with pytest.raises(ValueError, match="baseline"):
        bench.time_methods({"a": lambda: None}, bench.Protocol(graph=False), baseline="x",
                           timer=CountingTimer())


def test_defaults_are_the_posts_protocol():
    p = bench.PROTOCOL_A
    assert (p.graph, p.warmups, p.rounds, p.repeats) == (True, 8, 35, 5)
