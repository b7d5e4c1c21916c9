"""Importing convalgos after torch, with OMP_WAIT_POLICY unset, warns once with the cost and the fix."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

SCRIPT = ("import warnings; warnings.simplefilter('always')\n"
          "with warnings.catch_warnings(record=True) as caught:\n"
          "    {imports}\n"
          "print(sum('OMP_WAIT_POLICY' in str(w.message) for w in caught))")


def warnings_printed(imports: str, **env) -> int:
    environ = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | env
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(imports=imports)], env=environ,
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_torch_first_warns_once_with_the_fix():
    assert warnings_printed("import torch; import convalgos; import autotune") == 1


def test_convalgos_first_or_policy_set_is_quiet():
    assert warnings_printed("import convalgos; import torch") == 0
    assert warnings_printed("import torch; import convalgos", OMP_WAIT_POLICY="PASSIVE") == 0
