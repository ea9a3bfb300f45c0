"""What the backward allocates (issue 13: no memory beyond what it needs), counted on CPU with
the kernel launches skipped: every tensor an op creates is tracked until its storage dies, and
the peak of those live bytes is held to the buffers the backward cannot do without."""

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mamba2_tile import autograd, dispatch
from mamba2_tile.kernels.bwd_chunk import bwd_chunk_column_blocks, bwd_chunk_heads_per_block


class LiveBytes(TorchDispatchMode):
    """The peak of the bytes held by storages created under this mode (views of ``existing``
    tensors, or ops returning them, are not new storage)."""

    def __init__(self, existing):
        super().__init__()
        self.live = self.peak = 0
        self.existing = {t.untyped_storage().data_ptr() for t in existing}
        self.seen = set()

    def _free(self, pointer, nbytes):
        self.live -= nbytes
        self.seen.discard(pointer)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            pointer = storage.data_ptr()
            if pointer in self.seen or pointer in self.existing or storage.nbytes() == 0:
                continue
            self.seen.add(storage.data_ptr())
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._free, storage.data_ptr(), storage.nbytes())
        return out


@pytest.mark.parametrize("z", [False, True])
def test_backward_allocates_only_what_it_needs(monkeypatch, z):
    monkeypatch.setattr(dispatch, "launch", lambda grid, kernel, args: None)
    b, l, h, p, n, chunk = 2, 4096, 64, 16, 64, 64
    bf16 = torch.bfloat16
    x = torch.zeros(b, l, h, p, dtype=bf16)
    B = torch.zeros(b, l, 1, n, dtype=bf16)
    inputs = dict(x=x, dt=torch.full((b, l, h), 0.01), A=-torch.ones(h), B=B, C=B.clone(),
                  D=torch.ones(h), z=torch.zeros_like(x) if z else None, dt_bias=None,
                  initial_states=None)
    dy = torch.zeros_like(x)
    counter = LiveBytes([t for t in inputs.values() if t is not None] + [dy])
    with counter:
        autograd.ssd_backward(**inputs, chunk_size=chunk, dt_softplus=False,
                              dt_limit=(0.0, float("inf")), dy=dy, dfinal_states=None)
    states = b * h * (l // chunk) * p * n * 2          # chunk_states, dstates: input dtype
    rows32 = b * l * h * p * 4                        # one float32 (b, l, h, p)
    # bwd_chunk's dB and dC: one float32 (b, l, n) per block of heads, summed per group after.
    heads = bwd_chunk_heads_per_block(x.dtype, b, l // chunk, h, 1,
                                      bwd_chunk_column_blocks(x.dtype, chunk, n))
    assert heads > 1
    launch = 2 * b * l * (h // heads) * n * 4 + b * l * n * 4 * 2
    gradients = x.nbytes * (2 if z else 1)             # dx (and dz) as returned
    # per-position float32 pieces (dA_cumsum, dt, ddt, ddA_terms, running sums) and
    # per-head states (final_states, its gradient, initial_states')
    small = 16 * b * h * l * 4 + 4 * b * h * p * n * 4
    # the gate: y_ssd / dz, sigmoid(z), the gated dy and one temporary (float32)
    gate = 4 * rows32 if z else 0
    bound = 2 * states + launch + gradients + gate + small
    assert counter.peak <= bound, (counter.peak, bound)
