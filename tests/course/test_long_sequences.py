"""Notebook 10's checks (attention's scores, the backward pass through the chunk states) and
its cost plot, on the CPU."""

import matplotlib
import numpy as np
import pytest
import torch

from mamba2_tile.cost import attention_cost, attention_scores_bytes
from mamba2_tile.course.checks.long_sequences import (check_attention_scores_bytes,
                                                      check_state_pass_backward,
                                                      state_pass_backward)
from mamba2_tile.course.plots.long_sequences import plot_costs

matplotlib.use("Agg")


def test_cost_plot_has_one_line_per_method():
    seqlens = [1024, 4096]
    fig = plot_costs(seqlens, {"naive": [attention_cost(1, s, 2, 8) for s in seqlens],
                               "flash": [attention_cost(1, s, 2, 8, flash=True)
                                         for s in seqlens]})
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]


# ------------------------------------------------------------------------------ the checks

def test_scores_check_passes_the_package_and_names_slips(capsys):
    assert check_attention_scores_bytes(attention_scores_bytes)
    assert "✅" in capsys.readouterr().out
    assert not check_attention_scores_bytes(lambda seqlen, nheads, bytes_per_value:
                                            seqlen * nheads * bytes_per_value)
    assert "PAIR of tokens" in capsys.readouterr().out
    assert not check_attention_scores_bytes(lambda seqlen, nheads, bytes_per_value:
                                            seqlen * (seqlen + 1) // 2 * nheads * bytes_per_value)
    assert "whole square" in capsys.readouterr().out


def not_implemented(*args, **kwargs):
    raise NotImplementedError("Exercise: write your code here")


def test_backward_check_waits_for_the_exercise(capsys):
    assert not check_attention_scores_bytes(not_implemented)
    assert not check_state_pass_backward(not_implemented)
    assert capsys.readouterr().out.count("⏳") == 2


def forwards(decay, grad_local, grad_final):
    grads, grad = np.empty_like(grad_local), grad_final
    for c in range(grad_local.shape[-3]):
        grad = grad_local[..., c, :, :] + decay[..., c, None, None] * grad
        grads[..., c, :, :] = grad
    return grads


def next_decay(decay, grad_local, grad_final):
    grads, grad, n = np.empty_like(grad_local), grad_final, grad_local.shape[-3]
    for c in reversed(range(n)):
        grad = grad_local[..., c, :, :] + decay[..., min(c + 1, n - 1), None, None] * grad
        grads[..., c, :, :] = grad
    return grads


@pytest.mark.parametrize("wrong, hint", [
    (forwards, "went forwards"),
    (next_decay, "not decay[c + 1]"),
    (lambda decay, grad_local, grad_final: state_pass_backward(decay, grad_local,
                                                               0 * grad_final), "grad_final"),
])
def test_backward_check_names_the_slip(capsys, wrong, hint):
    assert check_state_pass_backward(state_pass_backward)
    assert not check_state_pass_backward(wrong)
    assert hint in capsys.readouterr().out


def test_reverse_pass_is_what_autograd_computes():
    gen = torch.Generator().manual_seed(0)
    nchunks, headdim, dstate = 6, 3, 4
    decay = torch.rand(nchunks, generator=gen, dtype=torch.float64) * 0.9 + 0.05
    inflow = torch.randn(nchunks, headdim, dstate, generator=gen, dtype=torch.float64,
                         requires_grad=True)
    h0 = torch.randn(headdim, dstate, generator=gen, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(nchunks + 1, headdim, dstate, generator=gen, dtype=torch.float64)
    states = [h0]
    for c in range(nchunks):
        states.append(decay[c] * states[-1] + inflow[c])
    loss = sum((w * h).sum() for w, h in zip(weights, states))
    loss.backward()
    grads = state_pass_backward(decay.numpy(), weights[:-1].numpy(), weights[-1].numpy())
    np.testing.assert_allclose(h0.grad.numpy(), grads[0], rtol=1e-12)
    np.testing.assert_allclose(inflow.grad[:-1].numpy(), grads[1:], rtol=1e-12)
    np.testing.assert_allclose(inflow.grad[-1].numpy(), weights[-1].numpy())
