"""When a learner is stuck: a second, more specific hint, then the solution, one exercise at a time.

A check's first hint is its diagnosis of the answer it was given (printed with the ❌). These two
are asked for by the exercise's id, the notebook's number and the exercise's, "07.3" for notebook
07's Exercise 3 (a failing check prints its id)::

    from mamba2_tile.course.checks import hint, reveal
    hint("07.3")      # the exact line or expression to look at
    reveal("07.3")    # the solution's code, read from solutions/

The solutions are read from ``solutions/``, the notebooks the exercise versions are generated
from (:mod:`mamba2_tile.course.exercises`), so what is revealed is what the course runs.
"""

from mamba2_tile.course.exercises import ROOT, exercise_solutions

SOLUTIONS = ROOT / "solutions"

# The second hint of every exercise: where in the code the usual mistake sits, named by its line
# or expression, without writing the answer out.
SECOND_HINTS = {
    "00.1": "Look at the factor in front: a cache keeps two tensors per token, the keys `k` and "
            "the values `v`, so the product starts with `2 * seqlen * ...`.",
    "00.2": "Look at your expression for `seqlen`: it must not be there. The state is one "
            "`(headdim, dstate)` matrix per head and layer, whatever the length.",
    "01.1": "Look at the line computing `new_state`: the old state is multiplied by "
            "`np.exp(dt_t * A)`, and the new input is `dt_t * np.outer(x_t, B_t)` (x along rows, "
            "B along columns); `y_t` is then `new_state @ C_t`, read from the *new* state.",
    "01.2": "Look at the update inside `for t in range(seqlen)`: the decay `np.exp(dt[:, t] * A)` "
            "has shape (batch, nheads) and needs `[:, :, None, None]` to scale the state; B and C "
            "are indexed by group, `group = np.arange(nheads) // (nheads // ngroups)`.",
    "02.1": "Look at the line that fills the upper triangle: it must be `np.where(lower, sums, "
            "-np.inf)`, not `np.tril(sums)` (that writes 0), and `sums` must come from a "
            "`np.cumsum(..., axis=-2)` over the terms `a[r]` with r > s.",
    "02.2": "Look at the argument of `segsum`: it is the product `dt * A` (one decay exponent per "
            "token), and `np.exp` is applied to segsum's result, not inside it.",
    "02.3": "Look at the last line: `(L * scores) @ (dt[:, None] * x)`, an elementwise `*` "
            "between `L` and `scores = C @ B.T`, and the values scaled row by row by "
            "`dt[:, None]`.",
    "03.1": "Look at the `np.cumsum` call: its `axis` must be -1 (along a chunk), and before "
            "`reshape(-1, chunk_size)` dt must be padded with `-len(dt) % chunk_size` zeros.",
    "03.2": "Look at the line computing the weights: `np.exp(dA_last - dA_cumsum) * dt`, "
            "with `dA_last = dA_cumsum[-1]`; the old state is scaled by `np.exp(dA_last)`.",
    "03.3": "Look at the mask line, `causal = np.tril(np.ones((Q, Q), dtype=bool))` (k=0: the "
            "diagonal stays), and at the `inter` line, `np.exp(dA_cumsum)[:, None] * (C @ "
            "h_enter.T)`.",
    "04.1": "Look at the `padding_mode=` of your `ct.load`: `ct.PaddingMode.ZERO` (zeros add "
            "nothing to a sum), and at the `axis=1` of `ct.sum`.",
    "04.2": "Look at the `ct.load`: index `(c,)` with `c = ct.bid(0)`, shape `(CHUNK,)`, "
            "`padding_mode=ct.PaddingMode.ZERO`; then `ct.cumsum(chunk, axis=0)` is stored at "
            "the same index.",
    "04.3": "Look at the loop body: `acc = ct.mma(a_tile, b_tile, acc)` must assign back to "
            "`acc`, and the loop runs over `ct.num_tiles(a, axis=1, shape=(TM, TK))` with "
            "`a` at index `(i, k)` and `b` at `(k, j)`.",
    "04.4": "Look at the two ranges: the loop is `for k in range(i + 1)` (the diagonal tile "
            "included), and the mask compares positions in the whole matrix, `rows = i * TM + "
            "ct.arange(TM, ...)` against `cols = k * TM + ct.arange(TM, ...)`, keeping `rows >= "
            "cols`.",
    "05.1": "Look at the index of your two `ct.store` calls: the outputs are laid out (batch, "
            "head, chunk, position), so the index is `(b, h, c, 0)` while `dt` was loaded at "
            "`(b, c, h)`.",
    "05.2": "Look at the two `ct.store` lines: the tile is `(CHUNK_SIZE, BLOCK_H)` and the "
            "output block `(1, BLOCK_H, 1, CHUNK_SIZE)`, so store "
            "`ct.reshape(ct.transpose(dA_c), out_shape)`; `A` is loaded at `(hb,)` with shape "
            "`(BLOCK_H,)`.",
    "05.3": "Look at the order of the lines preparing `dt_c`: bias, then softplus under "
            "`ct.where(dt_c <= SOFTPLUS_THRESHOLD, ...)`, then the clamp, and last "
            "`ct.where(in_sequence, dt_c, 0.0)` with `position = c * CHUNK_SIZE + "
            "ct.arange(CHUNK_SIZE, dtype=ct.int32)`.",
    "06.1": "Look at where `ct.store(chunk_states, ...)` sits in the loop: first, before the "
            "chunk updates `state` (it stores the state *entering* chunk c); then the update "
            "`state * ct.exp(dA_last) + ct.sum(outer, axis=0)`.",
    "06.2": "Look at the tile indices: the state tile is `(pt, nt)` in `chunk_states`' last two "
            "axes, `x` is loaded at `(b, c, h, pt)` and `B` at `(b, c, g, nt)`; and "
            "`b, h = ct.bid(0) // nheads, ct.bid(0) % nheads`.",
    "06.3": "Look at the `ct.mma` line: `ct.mma(ct.transpose(x_w), B_c, state * "
            "ct.exp(dA_last))`, the weighted `x_w` cast back to `x.dtype` before it.",
    "07.1": "Look at the number of chunks: `math.ceil(seqlen / chunk_size)`, not "
            "`seqlen // chunk_size`, times `chunk_size * chunk_size` values per (batch, head).",
    "07.2": "Look at the `weights = ct.where(i >= j, ...)` line (`>=`: the diagonal stays) and "
            "at `inter * ct.exp(...)`: both decays are `ct.exp` of the exponent.",
    "07.3": "Look at `scores = ct.where(rows >= cols, scores * decay * dt_j, 0.0)`: `>=`, not "
            "`>`, `decay = ct.exp(ct.minimum(dA_i - dA_j, 0.0))`, and `acc * ct.exp(dA_i)` for "
            "the inter-chunk part.",
    "08.1": "Look at what each stage passes on: `chunk_cumsum` returns `(dA_cumsum, dt)` with the "
            "*prepared* dt, and that dt (not the input `dt`) goes into `fwd_pass_state` and "
            "`compute_out`.",
    "08.2": "Look at the second call: it needs `initial_states=state`, the final state the "
            "first call returned with `return_final_states=True`.",
    "09.1": "Look at the milliseconds: `ms * 1e-3` seconds, and the bytes counted once each: "
            "x read and y written (`2 *`), dt, B and C (`2 *`, per group, not per head).",
    "09.2": "Look at the factor 2 (written once, read once) and at "
            "`math.ceil(seqlen / chunk_size)` for the number of chunks.",
    "09.3": "Look at what you return: the plan comes from `fwd_pass_state_launch(..., "
            "options=FwdPassStateOptions(occupancy=occupancy))`, the compile from "
            "`compile_kernel(launch.kernel, launch.args, target=\"sm_90\")`, and the answer is "
            "its `.registers`, an int.",
    "10.1": "Look at `seqlen * seqlen`: one score per pair of tokens, per head, per byte of value.",
    "10.2": "Look at the loop: `for c in reversed(range(...))`, and the update "
            "`grad = grad_local[..., c, :, :] + decay[..., c, None, None] * grad`, stored "
            "*after* it.",
    "11.1": "Look at the loop `for t in reversed(range(len(dt)))`: the gradient carried back is "
            "multiplied by `decay[t + 1]` (not `decay[t]`), then gets `np.outer(dy[t], C[t])`; "
            "`dx` is `dt[:, None] * np.einsum('tpn,tn->tp', dh, B)`.",
    "11.2": "Look at the line `g = np.exp(dA_cumsum[c, -1]) * g + from_outputs` inside "
            "`for c in reversed(range(len(dA_cumsum)))`, and at `from_outputs`'s weight "
            "`np.exp(dA_cumsum[c])`.",
    "12.1": "Look at the order inside the loop: `c = nchunks - 1 - k` (last chunk first), then "
            "`dstate = ct.exp(dA_last) * dstate + from_outputs`, and only then the store at "
            "`(b, h, c, 0, 0)`: the gradient of the state entering chunk c.",
    "12.2": "Look at the `ct.mma` line: `ct.mma(dy_c * ct.exp(dA), state, acc)`, each token's "
            "`dy` scaled by its own `exp(dA_i)` (a `(CHUNK_SIZE, 1)` column) before the product "
            "with the entering state `(BLOCK_P, BLOCK_N)`.",
    "13.1": "Look at the order: `optimizer.zero_grad()` before `loss.backward()`, and "
            "`optimizer.step()` after it.",
    "13.2": "Look at the sum: every tensor of every layer's cache in "
            "`params.key_value_memory_dict.values()`, each `t.numel() * t.element_size()`.",
}


def _known(exercise_id, ids):
    """The canonical form of ``exercise_id`` ("5.2" -> "05.2"), or a ValueError naming the ids."""
    notebook, _, number = str(exercise_id).partition(".")
    key = f"{notebook.zfill(2)}.{number}" if notebook.isdigit() and number.isdigit() else None
    if key not in ids:
        raise ValueError(f"no exercise {exercise_id!r}: an id is the notebook's number and the "
                         f"exercise's, e.g. \"05.2\"; the exercises are {', '.join(sorted(ids))}")
    return key


def second_hint(exercise_id):
    """The second hint of ``exercise_id``, e.g. ``"07.3"``."""
    return SECOND_HINTS[_known(exercise_id, SECOND_HINTS)]


def _solutions():
    """Every exercise's solved cell; a clear error where ``solutions/`` is not there (a package
    installed without the course's repository has none)."""
    solutions = exercise_solutions(SOLUTIONS)
    if not solutions:
        raise FileNotFoundError(f"no solution notebooks in {SOLUTIONS}: reveal reads them from "
                                "the course's repository (git clone it, then pip install -e .)")
    return solutions


def solution_code(exercise_id):
    """The solved cell of ``exercise_id``, read from ``solutions/``."""
    solutions = _solutions()
    return solutions[_known(exercise_id, solutions)]


def hint(exercise_id):
    """Print the second, more specific hint of an exercise: the line or expression to look at."""
    print(f"💡 Exercise {_known(exercise_id, SECOND_HINTS)}: {second_hint(exercise_id)}")


def reveal(exercise_id):
    """Print the solution of one exercise, the whole cell as the course's solutions have it."""
    key = _known(exercise_id, _solutions())
    print(f"# Solution of exercise {key}: try it yourself first, then compare.\n")
    print(solution_code(key))
