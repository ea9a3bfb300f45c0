"""A forward pass never writes to its inputs (issue #15, item 2).

The interpreter converts bfloat16 tensors to a float32 working copy; copying that back into
an input the kernel only read moved the tensor's ``_version``, and autograd then refuses the
graph that saved it ("modified by an inplace operation"). Every input of every dtype, on every
path of the plan, must come back with the same version and the same bits.
"""

import pytest
import torch

from mamba2_tile.api import forward_with_options, mamba_chunk_scan_combined
from mamba2_tile.kernels import DEFAULT_OPTIONS
from ssd_cases import DTYPES, Case, make_case

PATHS = {
    "planned": None,
    "three kernels": DEFAULT_OPTIONS.with_switches(fuse_state_passing=False),
    "sequence parallel": DEFAULT_OPTIONS.with_switches(fuse_state_passing=True,
                                                       segment_chunks=1),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_inputs_keep_their_version_and_values(dtype, path):
    case = Case(seqlen=140, dtype=dtype, D="channel", z=True, dt_bias=True,
                initial_states=True, dt_softplus=True, seed=1)
    inputs = make_case(case)
    versions = {name: t._version for name, t in inputs.items()}
    copies = {name: t.clone() for name, t in inputs.items()}
    kwargs = dict(chunk_size=64, dt_softplus=True, return_final_states=True, **inputs)
    if PATHS[path] is None:
        mamba_chunk_scan_combined(**kwargs)
    else:
        forward_with_options(options=PATHS[path], **kwargs)
    for name, tensor in inputs.items():
        assert tensor._version == versions[name], f"{name} was written in place"
        assert torch.equal(tensor, copies[name]), f"{name} changed"


def test_autograd_graph_that_saved_an_input_still_works():
    inputs = make_case(Case(seqlen=20, dtype=torch.bfloat16, seed=2))
    x = inputs["x"].clone().requires_grad_()
    saved = x * x                        # saves x for its backward pass
    inputs["x"] = x.detach()
    mamba_chunk_scan_combined(chunk_size=64, **inputs)
    saved.sum().backward()               # raised "modified by an inplace operation" before
    assert torch.equal(x.grad, 2 * x.detach())
