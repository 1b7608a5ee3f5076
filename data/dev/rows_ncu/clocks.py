"""Dev probe: do the clocks differ between our kernels and Liger's when each runs back to back? replay_k.py found
Liger's kernels faster back to back than their ncu duration and ours not. ncu reports the SM clock of one launch
(1.95-1.96 GHz for both); a power or clock difference under sustained load would show here. Each method (8192 x 1024,
a graph of 20 calls) is replayed continuously for 4 s while nvidia-smi samples the SM clock, memory clock and power
every 50 ms; the samples of each method's middle 3 s are summarized (median). Per call: the same window's replays.
Writes clocks.json into $OUT. Run: python3 data/dev/rows_ncu/clocks.py"""
import calendar
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from labkit.core.device import device_info  # noqa: E402
from labkit.ops import plans, rows_counted  # noqa: E402

OUT = Path(os.environ.get("OUT", "."))


def main():
    from labkit.studies import methods as registry
    rows, n = 8192, 1024
    torch.manual_seed(rows * 7 + n)
    x = torch.randn(rows, n, device="cuda") * 2 + 50
    w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    dev = device_info(0)
    y = torch.empty_like(x)
    fns = {"rows_counted": lambda: plans.execute(rows_counted.plan(rows, n, dev), x, w, b, 1e-5),
           "copy": lambda: y.copy_(x)}
    with torch.no_grad():
        fns["liger"] = registry.build(registry.get("liger"), x, w, b, 1e-5)["fn"]
    graphs = {}
    for name, fn in fns.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.cuda.graph(g):
            for _ in range(20):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        graphs[name] = g
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw",
                            "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)  # nvidia-smi's start-up
    t0 = time.time()
    windows = {}
    for name in ["rows_counted", "liger", "copy", "liger", "rows_counted"]:
        g = graphs[name]
        torch.cuda.synchronize()
        start, calls = time.time(), 0
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        mid = None
        while time.time() - start < 4.0:
            if mid is None and time.time() - start > 0.5:
                torch.cuda.synchronize()
                mid = time.time()
                a.record()
                calls = 0
            g.replay()
            calls += 20
            if calls % 2000 == 0:
                torch.cuda.synchronize()
        e.record()
        e.synchronize()
        windows.setdefault(name, []).append({"from": mid - t0, "to": time.time() - t0,
                                             "per_call_us": a.elapsed_time(e) * 1e3 / calls})
        time.sleep(0.5)
    smi.terminate()
    samples = []
    for line in smi.stdout.read().splitlines():
        try:
            stamp, sm, mem, power = [p.strip() for p in line.split(",")]
            whole, frac = stamp.split(".")
            t = calendar.timegm(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
            samples.append((t, float(sm), float(mem), float(power)))
        except ValueError:
            continue
    out = {}
    for name, ws in windows.items():  # nvidia-smi stamps local time: the device's is UTC, as time.time() counts
        for w_ in ws:
            inside = [s for s in samples if t0 + w_["from"] <= s[0] <= t0 + w_["to"]]
            w_.update({"samples": len(inside),
                       "sm_mhz": statistics.median(s[1] for s in inside) if inside else None,
                       "mem_mhz": statistics.median(s[2] for s in inside) if inside else None,
                       "power_w": statistics.median(s[3] for s in inside) if inside else None})
        out[name] = ws
        print(name, ws, flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": [rows, n],
            "commit": os.environ.get("LABKIT_GIT_COMMIT"), "t0": t0,
            "smi": samples}
    (OUT / "clocks.json").write_text(json.dumps({"meta": meta, "windows": out}, indent=1))


if __name__ == "__main__":
    main()
