"""The process compute-sanitizer runs: each target of a spec file once (labkit.studies.reliability.run_targets),
results written as JSON. Usage: reliability_target.py SPECS.json RESULTS.json"""
import json
import sys

from labkit.studies.reliability import run_targets

if __name__ == "__main__":
    specs = json.loads(open(sys.argv[1]).read())
    results = run_targets(specs)
    with open(sys.argv[2], "w") as f:
        json.dump(results, f, indent=1)
