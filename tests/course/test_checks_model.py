"""Notebook 13's checks: each likely mistake gets its own diagnosis; correct answers pass."""

import pytest

from mamba2_tile.course.checks.model import check_cache_bytes, check_training_step


def correct_step(model, optimizer, tokens):
    loss = model.loss(tokens)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def no_zero_grad(model, optimizer, tokens):
    loss = model.loss(tokens)
    loss.backward()
    optimizer.step()
    return loss.item()


def no_step(model, optimizer, tokens):
    loss = model.loss(tokens)
    optimizer.zero_grad()
    loss.backward()
    return loss.item()


def returns_tensor(model, optimizer, tokens):
    loss = model.loss(tokens)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def not_written(model, optimizer, tokens):
    raise NotImplementedError("Exercise: write your code here")


@pytest.mark.parametrize("step, passes, words", [
    (correct_step, True, "✅"),
    (no_zero_grad, False, "optimizer.zero_grad()"),
    (no_step, False, "optimizer.step()"),
    (returns_tensor, False, "loss.item()"),
    (not_written, False, "⏳"),
])
def test_training_step_check(step, passes, words, capsys):
    assert check_training_step(step) is passes
    assert words in capsys.readouterr().out


def all_bytes(params):
    return sum(t.numel() * t.element_size()
               for cache in params.key_value_memory_dict.values() for t in cache)


def values_only(params):
    return sum(t.numel() for cache in params.key_value_memory_dict.values() for t in cache)


def states_only(params):
    return sum(ssm.numel() * ssm.element_size()
               for _, ssm in params.key_value_memory_dict.values())


def first_layer_only(params):
    return sum(t.numel() * t.element_size() for t in params.key_value_memory_dict[0])


@pytest.mark.parametrize("fn, passes, words", [
    (all_bytes, True, "✅"),
    (values_only, False, "element_size"),
    (first_layer_only, False, "one entry per layer"),
    (states_only, False, "expected"),
])
def test_cache_bytes_check(fn, passes, words, capsys):
    assert check_cache_bytes(fn) is passes
    assert words in capsys.readouterr().out
