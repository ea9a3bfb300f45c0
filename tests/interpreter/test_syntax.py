"""The interpreter refuses the syntax cuTile refuses, pointing at the line (issue #15, item 6).

Python would run a kernel with a list or a `try` happily, so it used to pass on a laptop and fail
to compile on the GPU. Where cuda-tile is installed, its compiler is asked too, so the list of
rejected kernels cannot drift from what cuTile really rejects.
"""
import inspect

import numpy as np
import pytest

from mamba2_tile.interpreter import TileSyntaxError, launch

from . import syntax_kernels

REJECTED = {
    "list_of_tiles": "Unsupported syntax (a list",
    "list_comprehension": "Unsupported syntax (a list comprehension",
    "python_assert": "Unsupported syntax (assert",
    "try_except": "Unsupported syntax (try)",
    "for_else": "'for-else' is not supported",
    "dict_of_tiles": "Unsupported syntax (a dict)",
    "tuple_of_a_range": "All iterables in a tuple comprehension must be wrapped",
    "calls_a_bad_helper": "Unsupported syntax (a list",
}


def arguments():
    return (np.ones(32, np.float32), np.zeros(16, np.float32), 16)


def rejected_line(name):
    """The file line marked `# rejected` in the kernel (or, for one, the helper it calls)."""
    function = (syntax_kernels.helper_with_list if name == "calls_a_bad_helper"
                else getattr(syntax_kernels, name)._pyfunc)
    source, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(source)
                        if line.rstrip().endswith("# rejected"))


def interpreter_message(name):
    with pytest.raises(TileSyntaxError) as error:
        launch((1,), getattr(syntax_kernels, name), arguments())
    return str(error.value)


@pytest.mark.parametrize("name", REJECTED)
def test_rejected_with_the_kernel_line(name):
    message = interpreter_message(name)
    assert message.startswith(REJECTED[name])
    assert f"syntax_kernels.py\", line {rejected_line(name)}, in " in message
    assert "# rejected" in message.splitlines()[-1]


def test_rejected_before_any_block_runs():
    y = np.full(16, 7.0, np.float32)
    with pytest.raises(TileSyntaxError):
        launch((4,), syntax_kernels.list_of_tiles, (np.ones(32, np.float32), y, 16))
    assert (y == 7.0).all()


def test_ct_syntax_error_class_is_the_one_raised():
    from mamba2_tile.interpreter import api
    assert api.TileSyntaxError is TileSyntaxError


def test_allowed_syntax_runs():
    x, y = np.arange(32, dtype=np.float32), np.zeros(16, np.float32)
    launch((1,), syntax_kernels.allowed_syntax, (x, y, 16))
    np.testing.assert_array_equal(y, x[:16] + x[16:])


@pytest.mark.parametrize("name", [*REJECTED, "allowed_syntax"])
def test_cutile_agrees(name):
    real = pytest.importorskip("cuda.tile")
    from mamba2_tile.compiler import CompileError, compile_kernel

    kernel = getattr(syntax_kernels, name)
    if name == "allowed_syntax":
        compile_kernel(kernel, arguments())
        return
    with pytest.raises(CompileError) as error:
        compile_kernel(kernel, arguments())
    cause = error.value.__cause__
    assert isinstance(cause, real.TileSyntaxError), repr(cause)
    assert interpreter_message(name).startswith(cause.message)   # cuTile's words, then a hint
