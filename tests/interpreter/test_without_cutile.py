"""The interpreter and `mamba2_tile.tile.ct` work where cuda-tile cannot be installed.

The suite is run again in a subprocess in which `import cuda.tile` raises ImportError
(as on macOS, which has no cuda-tile wheel); the same kernels must pass.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mamba2_tile.compiler import NO_COMPILER, CompileError, compile_kernel, compiler_available
from mamba2_tile.interpreter import api
from mamba2_tile.tile import ct

BLOCKED = "MAMBA2_TILE_BLOCK_CUTILE"
REPO = Path(__file__).resolve().parents[2]

# `sys.modules[name] = None` makes `import name` raise ImportError.
RUN_BLOCKED = (
    "import sys; sys.modules['cuda.tile'] = None; import pytest; "
    "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', sys.argv[1]]))")


def test_ct_is_real_cutile_or_the_fallback():
    try:
        import cuda.tile as real
    except ImportError:
        real = None
    assert ct is (real if real is not None else api)
    if os.environ.get(BLOCKED):
        assert ct is api


@pytest.mark.skipif(ct is api, reason="already running without cuda-tile")
def test_suite_passes_without_cutile():
    env = {**os.environ, BLOCKED: "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", RUN_BLOCKED, str(Path(__file__).parent)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


def test_fallback_launch_explains_it_needs_a_gpu():
    with pytest.raises(RuntimeError, match="mamba2_tile.interpreter.launch"):
        api.launch(None, (1,), None, ())
    with pytest.raises(TypeError, match="cannot be called directly"):
        api.kernel(lambda: None)()


@ct.kernel
def copy_kernel(x, out, TILE: ct.Constant[int]):
    ct.store(out, index=(ct.bid(0),), tile=ct.load(x, index=(ct.bid(0),), shape=(TILE,)))


def test_compiling_without_cutile_says_what_is_skipped_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.tile", None)  # as where cuda-tile has no wheel
    monkeypatch.setitem(sys.modules, "cuda.tile.compilation", None)
    assert not compiler_available()
    x = np.zeros(8, np.float32)
    with pytest.raises(CompileError) as info:
        compile_kernel(copy_kernel, (x, x, 8), target="sm_90")
    assert info.value.summary == NO_COMPILER and "\n" not in NO_COMPILER
    assert "cubins" in NO_COMPILER and "registers" in NO_COMPILER
    detail = str(info.value)
    assert detail.startswith(NO_COMPILER)
    assert "pip install cuda-tile[tileiras]" in detail and "interpreter" in detail


def test_compile_error_summary_is_one_line_and_str_the_detail():
    err = CompileError("TypeCheckingError at line 3: bad\n  shape", "kernel 'k' for sm_90:\nfull text")
    assert err.summary == "TypeCheckingError at line 3: bad shape"
    assert str(err) == "kernel 'k' for sm_90:\nfull text"
    assert str(CompileError("only a summary")) == CompileError("only a summary").summary
