# Reference values for tests/test_convergence.py (written to convergence_reference.json beside this script),
# computed once with ArviZ 0.23.4 (numpy 2.4.6, scipy 1.17.1) in a
# throwaway venv:  python3 -m venv /tmp/arviz-venv && /tmp/arviz-venv/bin/pip install arviz==0.23.4
#                  /tmp/arviz-venv/bin/python this_script.py
import json

import arviz as az
import numpy as np

rng = np.random.default_rng(20261202)
cases = {}
# iid normal, AR(1) with rho 0.9, shifted chains, heavy tails, ties (integer draws), odd draw count, 1 chain
ar = np.zeros((4, 500))
e = rng.normal(size=(4, 500))
for t in range(1, 500):
    ar[:, t] = 0.9 * ar[:, t - 1] + e[:, t]
cases["iid"] = rng.normal(size=(4, 200))
cases["ar1"] = ar
cases["shifted"] = rng.normal(size=(3, 100)) + np.array([[0.0], [0.5], [1.5]])
cases["cauchy"] = rng.standard_cauchy(size=(4, 150))
cases["ties"] = rng.integers(0, 5, size=(4, 80)).astype(float)
cases["odd"] = rng.normal(size=(2, 101)).cumsum(axis=1)
cases["one_chain"] = rng.normal(size=(1, 64))
cases["short"] = rng.normal(size=(2, 9))
out = {}
for name, draws in cases.items():
    out[name] = {"draws": draws.tolist(),
                 "rhat_rank": float(az.rhat(draws, method="rank")),
                 "ess_bulk": float(az.ess(draws, method="bulk")),
                 "ess_tail": float(az.ess(draws, method="tail"))}
with open("convergence_reference.json", "w") as handle:
    json.dump({"arviz": az.__version__, "cases": out}, handle)
print({k: (v["rhat_rank"], v["ess_bulk"], v["ess_tail"]) for k, v in out.items()})
