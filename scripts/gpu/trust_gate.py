"""The trust gate's GPU step (see trust_gate.sh): its check on this install (`trust_canary`, which
scripts/trust_table.py turns into a verified key) and its behaviour in four situations (`trust_gate`), as one run
directory named "trust_gate". Notebook 08 records both when it runs live; this step records them without the
notebook's other measurements, so a key can be verified at the commit that last changed what it digests."""
import os
import sys
from pathlib import Path

from labkit.records.run import Run
from labkit.studies import dropin_bits


def main() -> int:
    run = Run.create(Path(os.environ.get("LABKIT_RUNS_ROOT", "build/runs")), "trust_gate", {}, device="cuda")
    canary, gate = dropin_bits.trust_canary("cuda"), dropin_bits.trust_gate("cuda")
    run.write("trust_canary", canary)
    run.write("trust_gate", gate)
    run.close()
    print(f"run {run.path}: check {'passed' if canary['identical'] else 'FAILED'} ({canary['cases']} cases, "
          f"{canary['seconds']} s); " + "; ".join(f"{r['situation']}: {r['served']}"
                                                   for r in dropin_bits.trust_gate_rows(gate)))
    return 0 if canary["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
