"""Checks for notebook 13, the layer in a language model: one training step, and the bytes a
generation cache holds.

The training step is compared with the same step written here, from the same model and the same
batch: the loss it returns and every parameter after two steps (two, so that gradients left to
accumulate between steps show). The cache is compared with the sum over the tensors it holds.
"""

import copy

import torch

from mamba2_tile.course.checks.feedback import NOT_DONE, attempt, exercise, fail
from mamba2_tile.layer import InferenceParams
from mamba2_tile.model import Mamba2LM, Mamba2LMConfig

_TINY = Mamba2LMConfig(d_model=16, n_layer=1, d_state=8, headdim=8)


def _reference_step(model, optimizer, tokens):
    loss = model.loss(tokens)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _run_two_steps(step, model, tokens):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return [step(model, optimizer, tokens) for _ in range(2)]


def _largest_change(model, before):
    return max((p.detach() - before[n]).abs().max().item() for n, p in model.named_parameters())


@exercise("13.1")
def check_training_step(training_step):
    """``training_step(model, optimizer, tokens) -> float`` (the loss before the update)."""
    torch.manual_seed(0)
    model = Mamba2LM(_TINY)
    tokens = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    reference = copy.deepcopy(model)
    got = attempt("training_step", _run_two_steps, training_step, model, tokens)
    if got is NOT_DONE:
        return False
    expected = _run_two_steps(_reference_step, reference, tokens)
    if not all(isinstance(loss, float) for loss in got):
        fail(f"❌ training_step must return the loss as a Python float (`loss.item()`), got "
             f"{type(got[0]).__name__}.")
        return False
    if abs(got[0] - expected[0]) > 1e-4 * abs(expected[0]):
        fail(f"❌ the first loss is {got[0]:.4f}, expected {expected[0]:.4f}: compute it with "
             f"`model.loss(tokens)` before changing anything.")
        return False
    if _largest_change(model, before) == 0:
        fail("❌ no parameter changed: after `loss.backward()` the optimizer must take its "
             "step, `optimizer.step()`.")
        return False
    gap = max((p - q).abs().max().item()
              for p, q in zip(model.parameters(), reference.parameters()))
    if gap > 1e-4:
        fail(f"❌ after two steps the parameters differ from the expected ones by up to "
             f"{gap:.2e}. Did the second step start from zero gradients? Call "
             f"`optimizer.zero_grad()` before `loss.backward()`, or the gradients of both "
             f"steps add up.")
        return False
    print("✅ training_step: the loss, and the parameters after two steps, are as expected.")
    return True


@exercise("13.2")
def check_cache_bytes(cache_bytes):
    """``cache_bytes(params) -> int``: the bytes of every tensor in
    ``params.key_value_memory_dict``, for caches of two dtypes."""
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        model = Mamba2LM(Mamba2LMConfig(d_model=16, n_layer=2, d_state=8, headdim=8),
                         dtype=dtype)
        params = InferenceParams(max_seqlen=8, max_batch_size=3)
        with torch.no_grad():
            model(torch.zeros(3, 5, dtype=torch.int64), inference_params=params)
        expected = sum(t.numel() * t.element_size()
                       for cache in params.key_value_memory_dict.values() for t in cache)
        got = attempt("cache_bytes", cache_bytes, params)
        if got is NOT_DONE:
            return False
        if got != expected:
            hint = ""
            numbers = expected // torch.tensor([], dtype=dtype).element_size()
            if got == numbers:
                hint = " That is the number of values: multiply each by `t.element_size()`."
            elif got * 2 == expected or got == expected // len(params.key_value_memory_dict):
                hint = (" Only part of the cache is counted: each layer holds two tensors "
                        "(the convolution window and the state), and there is one entry per "
                        "layer.")
            fail(f"❌ cache_bytes gave {got} for a {str(dtype)[6:]} cache of 2 layers, batch 3; "
                 f"expected {expected}.{hint}")
            return False
    print("✅ cache_bytes counts every tensor of every layer, in bytes.")
    return True
