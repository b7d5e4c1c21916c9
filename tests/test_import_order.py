"""Importing convalgos after torch (OMP_WAIT_POLICY unset) or after numpy (OPENBLAS_THREAD_TIMEOUT unset) warns
once with the cost and the fix; importing it first, or setting the variable, is quiet."""
import os
import subprocess
import sys

import pytest

SCRIPT = ("import warnings; warnings.simplefilter('always')\n"
          "with warnings.catch_warnings(record=True) as caught:\n"
          "    {imports}\n"
          "print(sum({variable!r} in str(w.message) for w in caught))")


def warnings_printed(imports: str, variable: str, **env) -> int:
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")}
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(imports=imports, variable=variable)],
                         env=environ | env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_torch_first_warns_once_with_the_fix():
    pytest.importorskip("torch")
    assert warnings_printed("import torch; import convalgos; import autotune", "OMP_WAIT_POLICY") == 1


def test_convalgos_first_or_policy_set_is_quiet():
    pytest.importorskip("torch")
    assert warnings_printed("import convalgos; import torch", "OMP_WAIT_POLICY") == 0
    assert warnings_printed("import torch; import convalgos", "OMP_WAIT_POLICY", OMP_WAIT_POLICY="PASSIVE") == 0


def test_numpy_first_warns_once_with_the_fix():
    import numpy
    if "openblas" not in numpy.__config__.CONFIG["Build Dependencies"]["blas"].get("name", ""):
        pytest.skip("numpy is not built with OpenBLAS")
    assert warnings_printed("import numpy; import convalgos; import autotune", "OPENBLAS_THREAD_TIMEOUT") == 1


def test_convalgos_first_or_timeout_set_is_quiet():
    assert warnings_printed("import convalgos; import numpy; import autotune", "OPENBLAS_THREAD_TIMEOUT") == 0
    assert warnings_printed("import autotune; import numpy", "OPENBLAS_THREAD_TIMEOUT") == 0
    assert warnings_printed("import numpy; import convalgos", "OPENBLAS_THREAD_TIMEOUT",
                            OPENBLAS_THREAD_TIMEOUT="16") == 0


def test_the_timeout_reaches_openblas_before_numpy_loads_it():
    code = "import convalgos, os, numpy; print(os.environ['OPENBLAS_THREAD_TIMEOUT'])"
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    assert subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True,
                          check=True).stdout.strip() == "16"


@pytest.mark.parametrize("given, expected", [(None, "10000"), ("0", "0")])
def test_the_spin_count_is_set_unless_the_user_set_one(given, expected):
    code = "import convalgos, os; print(os.environ['GOMP_SPINCOUNT'])"
    environ = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    if given is not None:
        environ["GOMP_SPINCOUNT"] = given
    assert subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True,
                          check=True).stdout.strip() == expected
