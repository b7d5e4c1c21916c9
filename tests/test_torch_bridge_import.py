"""``import autotune`` never imports torch (a fresh process); ``autotune.torch`` imports the real torch."""
import subprocess
import sys

import pytest


def test_import_autotune_alone_does_not_import_torch():
    code = "import sys, autotune, autotune.nn, autotune.models; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_bridge_imports_the_real_torch():
    torch = pytest.importorskip("torch")
    import autotune.torch
    from autotune.torch import fallback, function, module
    assert autotune.torch is not torch and "autotune" not in torch.__file__
    assert all(m.torch is torch for m in (fallback, function, module))
