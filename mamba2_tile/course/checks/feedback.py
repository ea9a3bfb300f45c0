"""What every exercise check does: call the learner's code, compare, and say precisely what is off.

A check prints one verdict and returns ``True``/``False``:

* ``✅`` the answer matches;
* ``⏳`` the exercise still raises ``NotImplementedError`` (the state every exercise starts in);
* ``❌`` it does not match: the shape, the first positions that differ with both values, the
  largest error, a hint, and for the exercises where it helps a heat-map of where the answer is
  wrong (:mod:`mamba2_tile.course.plots.errors`).

A check marked with :func:`exercise` then points at the second, more specific hint and at the
solution (:mod:`mamba2_tile.course.checks.stuck`).

Checks print instead of raising so that an unfinished notebook still runs top to bottom; errors
the learner's code raises itself (an ``IndexError``, say) are left alone, since their traceback is
the most useful thing to see.

Kernel exercises go through :func:`launch_exercise`, which reports an unwritten kernel as
``NotImplementedError`` on every backend: the interpreter would run the stub and raise it, but
real cuTile refuses to compile a ``raise`` at all.
"""

import functools
import inspect

import numpy as np

from mamba2_tile.dispatch import kernel_function, launch

NOT_DONE = object()
"""Returned by :func:`attempt` when the exercise is not written yet."""

_FAILURES = [0]
"""How many ❌ verdicts :func:`fail` has printed, so that :func:`exercise` can tell a wrong
answer (worth pointing at more help) from an unwritten one."""


def exercise(exercise_id):
    """Mark a check as the one of exercise ``exercise_id`` (e.g. ``"07.3"``, notebook 07's
    Exercise 3): after a wrong answer it says where the second hint and the solution are."""
    def mark(check):
        @functools.wraps(check)
        def run(*args, **kwargs):
            before = _FAILURES[0]
            passed = check(*args, **kwargs)
            if not passed and _FAILURES[0] > before:
                print(f'   Stuck? hint("{exercise_id}") points at the line to look at, '
                      f'reveal("{exercise_id}") shows the solution '
                      "(from mamba2_tile.course.checks import hint, reveal).")
            return passed
        run.exercise_id = exercise_id
        return run
    return mark


def attempt(name, fn, *args, **kwargs):
    """Call the learner's ``fn``; on ``NotImplementedError`` print a friendly line instead."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        print(
            f"⏳ {name} is not implemented yet: replace the `raise NotImplementedError` "
            "in the cell above with your code, run that cell, then run this check again."
        )
        return NOT_DONE


def kernel_is_stub(kernel):
    """Does ``kernel`` still hold the exercise stub (``raise NotImplementedError``)?"""
    try:
        return "raise NotImplementedError" in inspect.getsource(kernel_function(kernel))
    except (OSError, TypeError):
        return False


def launch_exercise(grid, kernel, args):
    """Launch the learner's kernel through the course's dispatch point.

    An unwritten kernel raises ``NotImplementedError`` (for :func:`attempt`) before anything is
    compiled; a ``NotImplementedError`` from a written kernel means the CPU interpreter lacks an
    operation it uses, which must not pass for "not written yet", so it becomes a RuntimeError.
    """
    if kernel_is_stub(kernel):
        raise NotImplementedError("the kernel is still the exercise stub")
    try:
        launch(grid, kernel, args)
    except NotImplementedError as err:
        raise RuntimeError(f"the kernel uses something the CPU tile interpreter does not "
                           f"support: {err}") from err


def _to_numpy(value):
    """NumPy view of an array-like (torch tensors included, on any device)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def _format_index(index, axes=None):
    """``[0, 2, 5]``, or with axis names ``[batch 0, chunk 2, position in chunk 5]``."""
    if axes is None:
        return "[" + ", ".join(str(int(i)) for i in index) + "]"
    return "[" + ", ".join(f"{axis} {int(i)}" for axis, i in zip(axes, index)) + "]"


def fail(message):
    """Print a ❌ verdict (every check prints its ❌ through here, so :func:`exercise` sees it);
    return False."""
    _FAILURES[0] += 1
    print(message)
    return False


def compare(name, got, expected, *, atol=1e-10, rtol=1e-8, hint=None, max_listed=5, axes=None,
            picture=None):
    """Compare ``got`` with ``expected`` elementwise and print a verdict; return whether it passed.

    Equal infinities count as equal; a NaN in ``got`` never does. ``axes`` names the axes of
    the arrays (e.g. ``("batch", "head", "chunk", "position in chunk")``) so that a wrong
    position is printed in the learner's terms rather than as bare numbers. ``picture``, a pair
    ``(rows, columns)`` of axis names (or tuples of names, flattened together), asks for a
    heat-map of the wrong positions over those axes when the values differ; it needs ``axes``.
    """
    if axes is not None and len(axes) != np.ndim(expected):
        raise ValueError(f"axes names {len(axes)} axes, expected has {np.ndim(expected)}")
    if picture is not None and axes is None:
        raise ValueError("picture names axes, so compare needs axes too")
    if got is None:
        return fail(f"❌ {name}: got None. Did the function forget to `return` its result?")
    got = _to_numpy(got)
    expected = _to_numpy(expected)
    if got.shape != expected.shape:
        fail(f"❌ {name}: shape {got.shape}, expected {expected.shape}.")
        if hint:
            print(f"   Hint: {hint}")
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isclose(got.astype(np.float64), expected.astype(np.float64),
                           atol=atol, rtol=rtol)
        close &= ~(np.isnan(got) & ~np.isnan(expected))
        if close.all():
            print(f"✅ {name} matches ({got.size} values, shape {got.shape}).")
            return True
        wrong = np.argwhere(~close)
        diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    fail(f"❌ {name}: {len(wrong)} of {got.size} values differ (shape {got.shape}).")
    for index in wrong[:max_listed]:
        i = tuple(index)
        print(f"   at {_format_index(i, axes)}: got {got[i].item()!r}, expected {expected[i].item()!r}")
    if len(wrong) > max_listed:
        print(f"   ... and {len(wrong) - max_listed} more.")
    finite = np.where(np.isfinite(diff) & ~close, diff, -1.0)
    if np.isnan(got).any():
        print(f"   {int(np.isnan(got).sum())} values are NaN.")
    if finite.max() >= 0:
        worst = np.unravel_index(np.argmax(finite), finite.shape)
        print(f"   Largest finite error {finite[worst]:.3g} at {_format_index(worst, axes)} "
              f"(allowed: {atol:g} + {rtol:g}·|expected|).")
    if hint:
        print(f"   Hint: {hint}")
    if picture is not None:
        # Imported here: matplotlib is needed only once an answer is wrong.
        from mamba2_tile.course.plots.errors import plot_error
        plot_error(name.split(",")[0], got, expected, ~close, axes, *picture)
    return False


def compare_counts(name, fn, reference, cases, hint):
    """Check a counting exercise (bytes, FLOPs) on several ``cases`` at once.

    A case is a dict (the learner's function is called with keywords) or a tuple (called
    positionally, in the order of ``reference``'s parameters). ``hint`` is a string, or a
    function of the learner's answers that returns one (to name the mistake those answers
    reveal). On a mismatch the first wrong call is spelled out in full.
    """
    answers = []
    for case in cases:
        answer = (attempt(name, fn, **case) if isinstance(case, dict)
                  else attempt(name, fn, *case))
        if answer is NOT_DONE:
            return False
        if answer is None:
            return compare(name, None, None)
        answers.append(float(answer))
    got = np.array(answers)
    expected = np.array([float(reference(**case) if isinstance(case, dict) else reference(*case))
                         for case in cases])
    if compare(name, got, expected, atol=0.5, rtol=0.0, hint=hint(got) if callable(hint) else hint):
        return True
    first = int(np.argmax(np.abs(got - expected) > 0.5))
    case = cases[first]
    if not isinstance(case, dict):
        case = dict(zip(inspect.signature(reference).parameters, case))
    call = ", ".join(f"{k}={v}" for k, v in case.items())
    print(f"   Call [{first}] was {name}({call}): expected {expected[first]:.0f}.")
    return False
