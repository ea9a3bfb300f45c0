"""`launch` sends CUDA tensors to real cuTile and everything else to the CPU interpreter.

The routing tests replace both back ends with recorders, so they run anywhere; the last tests
run a real kernel through whichever back end this machine has.
"""

import sys
import types

import numpy as np
import pytest
import torch

from mamba2_tile import dispatch


@pytest.fixture
def interpreter_calls(monkeypatch):
    """Replace the interpreter with a recorder that adds 1 to the first argument, in place."""
    calls = []

    def fake_launch(grid, kernel, args):
        calls.append((grid, kernel, args))
        args[0][...] += 1
        return (0,)       # the positions of the arguments it stored to

    monkeypatch.setitem(sys.modules, "mamba2_tile.interpreter",
                        types.SimpleNamespace(launch=fake_launch))
    monkeypatch.delenv(dispatch.FORCE_ENV, raising=False)
    return calls


class FakeCudaTensor:
    """Just enough of a CUDA torch tensor to test routing on a machine without a GPU."""

    is_cuda = True

    def __init__(self, values):
        self.values = torch.as_tensor(values, dtype=torch.float32)
        self.copies_in = 0

    def detach(self):
        return self

    def cpu(self):
        return self.values.clone()

    def copy_(self, source):
        self.copies_in += 1
        self.values.copy_(source)


def kernel(x, y, out, TILE):
    """Stands in for a @ct.kernel: only its parameter names are read."""


def test_cpu_arrays_go_to_the_interpreter(interpreter_calls):
    x = np.zeros(4, np.float32)
    dispatch.launch((2,), kernel, (x, np.ones(4), torch.zeros(4), 2))
    assert len(interpreter_calls) == 1 and interpreter_calls[0][0] == (2,)
    assert interpreter_calls[0][2][0] is x  # the caller's own array, updated in place
    assert dispatch.last_backend() == dispatch.INTERPRETER


def test_mixed_devices_name_the_argument(interpreter_calls):
    with pytest.raises(ValueError, match="'y' is on the GPU but 'x' is on the CPU"):
        dispatch.launch((1,), kernel, (torch.zeros(4), FakeCudaTensor([0.0]), torch.zeros(4), 2))
    assert not interpreter_calls


def test_forced_interpreter_copies_cuda_tensors_back(interpreter_calls, monkeypatch):
    monkeypatch.setenv(dispatch.FORCE_ENV, "1")
    monkeypatch.setattr(dispatch, "gpu_available", lambda: True)
    x, y, out = FakeCudaTensor([1.0, 2.0]), FakeCudaTensor([0.0]), FakeCudaTensor([0.0])
    dispatch.launch((1,), kernel, (x, y, out, 2))
    assert torch.equal(x.values, torch.tensor([2.0, 3.0]))
    assert (x.copies_in, y.copies_in, out.copies_in) == (1, 0, 0)  # only what was stored to
    assert isinstance(interpreter_calls[0][2][0], torch.Tensor)  # the interpreter saw CPU copies


def test_cuda_tensors_go_to_cutile(interpreter_calls, monkeypatch):
    ct = pytest.importorskip("cuda.tile")
    launched = []
    monkeypatch.setattr(ct, "launch", lambda *call: launched.append(call))
    monkeypatch.setattr(dispatch, "gpu_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: "stream")
    args = (FakeCudaTensor([0.0]), FakeCudaTensor([0.0]), FakeCudaTensor([0.0]), 2)
    dispatch.launch((3, 1), kernel, args)
    assert launched == [("stream", (3, 1), kernel, args)]
    assert not interpreter_calls
    assert dispatch.last_backend() == dispatch.CUTILE


def test_numpy_scalars_are_numbers_not_cpu_arrays(interpreter_calls, monkeypatch):
    # np.float64 has __array_interface__ but is a constant, like a Python float (notebook 05
    # passes LOG2E = 1 / np.log(2) next to CUDA tensors).
    ct = pytest.importorskip("cuda.tile")
    launched = []
    monkeypatch.setattr(ct, "launch", lambda *call: launched.append(call))
    monkeypatch.setattr(dispatch, "gpu_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: "stream")
    args = (FakeCudaTensor([0.0]), FakeCudaTensor([0.0]), FakeCudaTensor([0.0]), np.float64(1.5))
    dispatch.launch((1,), kernel, args)
    assert len(launched) == 1 and not interpreter_calls


def test_describe_backend(monkeypatch):
    monkeypatch.setenv(dispatch.FORCE_ENV, "1")
    assert dispatch.describe_backend() == "CPU tile interpreter (forced by MAMBA2_TILE_INTERPRET=1)"
    assert dispatch.default_device() == "cpu"
    monkeypatch.setenv(dispatch.FORCE_ENV, "0")
    monkeypatch.setattr(dispatch, "gpu_available", lambda: False)
    assert dispatch.describe_backend() == "CPU tile interpreter (no GPU found)"


def test_a_real_kernel_runs_where_the_device_says():
    pytest.importorskip("mamba2_tile.interpreter")
    try:
        import compile_kernels as kernels
    except ImportError:
        from tests import compile_kernels as kernels
    device = dispatch.default_device()
    x = torch.arange(1000, dtype=torch.float32, device=device)
    y = torch.ones(1000, device=device)
    out = torch.zeros(1000, device=device)
    dispatch.launch((4,), kernels.scale_add, (x, y, out, 2.0, 256))
    torch.testing.assert_close(out, 2 * x + y)
    expected = dispatch.CUTILE if device == "cuda" else dispatch.INTERPRETER
    assert dispatch.last_backend() == expected


def test_a_launch_reads_no_signature(interpreter_calls, monkeypatch):
    # The names are for error messages: a launch without an error never asks for them.
    def fresh(x, y, out, TILE):
        """A kernel no other test launched."""
    monkeypatch.setattr(dispatch.inspect, "signature",
                        lambda f: pytest.fail("a launch read the kernel's signature"))
    for _ in range(3):
        dispatch.launch((1,), fresh, (torch.zeros(4), torch.zeros(4), torch.zeros(4), 2))
    assert len(interpreter_calls) == 3


def test_parameter_names_are_read_once_per_kernel(monkeypatch):
    def fresh(a, b, c):
        """A kernel no other test asked about."""
    read = []
    signature = dispatch.inspect.signature
    monkeypatch.setattr(dispatch.inspect, "signature", lambda f: read.append(f) or signature(f))
    assert dispatch.parameter_names(fresh) == ("a", "b", "c")
    assert dispatch.parameter_names(fresh) == ("a", "b", "c")
    assert read == [fresh]


def test_mixed_devices_inside_a_tuple_are_refused(interpreter_calls):
    with pytest.raises(ValueError, match="'y' is on the GPU but 'y' is on the CPU"):
        dispatch.launch((1,), kernel, (2, (torch.zeros(1), FakeCudaTensor([0.0])), 3, 4))
    assert not interpreter_calls

