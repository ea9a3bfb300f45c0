"""The cost model against brute force: scalar-loop versions of each algorithm, run on tiny shapes
with numbers that count every operation done on them, and byte counts taken from real arrays."""

import math

import numpy as np
import pytest

from mamba2_tile import cost, reference
from mamba2_tile.problem import Problem


class Counted:
    """A float that counts every add, subtract, multiply and exp done with it."""

    ops = 0

    def __init__(self, value):
        self.value = float(value)

    @staticmethod
    def _value(other):
        return other.value if isinstance(other, Counted) else float(other)

    def _op(self, result):
        Counted.ops += 1
        return Counted(result)

    def __add__(self, other):
        return self._op(self.value + self._value(other))

    __radd__ = __add__

    def __sub__(self, other):
        return self._op(self.value - self._value(other))

    def __mul__(self, other):
        return self._op(self.value * self._value(other))

    __rmul__ = __mul__

    def exp(self):
        return self._op(math.exp(self.value))


def counted(array):
    return np.vectorize(Counted, otypes=[object])(array)


def plain(array):
    return np.vectorize(lambda c: c.value, otypes=[float])(array)


def zero():
    return Counted(0.0)


def matmul(a, b):
    """(m, k) @ (k, n), one multiply and one add per term."""
    m, k = a.shape
    out = np.empty((m, b.shape[1]), dtype=object)
    for i in range(m):
        for j in range(b.shape[1]):
            acc = zero()
            for r in range(k):
                acc = acc + a[i, r] * b[r, j]
            out[i, j] = acc
    return out


SHAPES = [
    dict(batch=1, seqlen=6, nheads=2, headdim=2, dstate=3, ngroups=1, chunk_size=4),
    dict(batch=2, seqlen=8, nheads=2, headdim=3, dstate=2, ngroups=2, chunk_size=4),
]


def inputs(batch, seqlen, nheads, headdim, dstate, ngroups, seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        x=rng.standard_normal((batch, seqlen, nheads, headdim)),
        dt=rng.uniform(0.1, 0.5, (batch, seqlen, nheads)),
        A=-rng.uniform(0.5, 1.5, nheads),
        B=rng.standard_normal((batch, seqlen, ngroups, dstate)),
        C=rng.standard_normal((batch, seqlen, ngroups, dstate)),
        D=rng.standard_normal(nheads),
    )


def problem(shape):
    return Problem(**shape)


def head_slices(a, b, h, nheads):
    group = h // (nheads // a["B"].shape[2])
    return (a["x"][b, :, h], a["dt"][b, :, h], a["A"][h], a["B"][b, :, group],
            a["C"][b, :, group], a["D"][h])


def pad(t, length):
    return np.concatenate([t, np.zeros((length - t.shape[0],) + t.shape[1:])])


@pytest.mark.parametrize("shape", SHAPES)
def test_chunked_flops_match_a_scalar_loop(shape):
    p = problem(shape)
    a = inputs(**{k: v for k, v in shape.items() if k != "chunk_size"})
    s = p.chunk_size
    counts = {"chunk_cumsum": 0, "fwd_pass_state": 0, "compute_out": 0}
    y = np.empty((p.batch, p.seqlen, p.nheads, p.headdim))
    for b in range(p.batch):
        for h in range(p.nheads):
            x, dt, A, B, C, D = head_slices(a, b, h, p.nheads)
            x, dt, B, C = (counted(pad(t, p.padded_seqlen)) for t in (x, dt, B, C))
            Counted.ops = 0
            dA = np.empty(p.padded_seqlen, dtype=object)
            for c in range(p.nchunks):
                acc = zero()
                for i in range(c * s, (c + 1) * s):
                    acc = acc + dt[i] * A
                    dA[i] = acc
            counts["chunk_cumsum"] += Counted.ops

            Counted.ops = 0
            state = counted(np.zeros((p.headdim, p.dstate)))
            entering = []
            for c in range(p.nchunks):
                entering.append(state)
                rows = slice(c * s, (c + 1) * s)
                last = dA[(c + 1) * s - 1]
                w = np.array([(last - dA[i]).exp() * dt[i] for i in range(c * s, (c + 1) * s)])
                wx = np.array([[w[i] * x[rows][i, j] for j in range(p.headdim)]
                               for i in range(s)])
                inflow = matmul(wx.T, B[rows])
                decay = last.exp()
                state = np.array([[decay * state[i, j] + inflow[i, j]
                                   for j in range(p.dstate)] for i in range(p.headdim)])
            counts["fwd_pass_state"] += Counted.ops

            Counted.ops = 0
            out = []
            for c in range(p.nchunks):
                rows = slice(c * s, (c + 1) * s)
                dAc = dA[rows]
                ch = matmul(C[rows], entering[c].T)
                decay_in = [dAc[i].exp() for i in range(s)]
                inter = np.array([[decay_in[i] * ch[i, j] for j in range(p.headdim)]
                                  for i in range(s)])
                cb = matmul(C[rows], B[rows].T)
                scores = np.empty((s, s), dtype=object)
                for i in range(s):
                    for j in range(s):
                        decay = (dAc[i] - dAc[j]).exp()
                        if j > i:                    # computed, then masked, as a kernel does
                            decay = Counted(0.0)
                        scores[i, j] = cb[i, j] * decay * dt[rows][j]
                intra = matmul(scores, x[rows])
                out.append(np.array([[inter[i, j] + intra[i, j] + D * x[rows][i, j]
                                      for j in range(p.headdim)] for i in range(s)]))
            counts["compute_out"] += Counted.ops
            y[b, :, h] = plain(np.concatenate(out))[:p.seqlen]

    ref = reference.ssd_recurrent(**a)
    np.testing.assert_allclose(y, ref, atol=1e-12)   # the loop really is the algorithm
    for name, stage in cost.chunked_costs(p).items():
        assert stage.flops == counts[name], name


@pytest.mark.parametrize("shape", SHAPES)
def test_recurrent_and_quadratic_flops_match_a_scalar_loop(shape):
    p = problem(shape)
    a = inputs(**{k: v for k, v in shape.items() if k != "chunk_size"})
    rec, quad = 0, 0
    y_rec = np.empty((p.batch, p.seqlen, p.nheads, p.headdim))
    y_quad = np.empty_like(y_rec)
    for b in range(p.batch):
        for h in range(p.nheads):
            x, dt, A, B, C, D = (counted(t) if isinstance(t, np.ndarray) else t
                                 for t in head_slices(a, b, h, p.nheads))
            Counted.ops = 0
            state = counted(np.zeros((p.headdim, p.dstate)))
            for t in range(p.seqlen):
                decay = (dt[t] * A).exp()
                dtx = [dt[t] * x[t, j] for j in range(p.headdim)]
                state = np.array([[decay * state[i, j] + dtx[i] * B[t, j]
                                   for j in range(p.dstate)] for i in range(p.headdim)])
                yt = matmul(state, C[t][:, None])
                y_rec[b, t, h] = plain(np.array([yt[i, 0] + D * x[t, i]
                                                 for i in range(p.headdim)]))
            rec += Counted.ops

            Counted.ops = 0
            l = p.seqlen
            dA = [dt[t] * A for t in range(l)]
            mask = np.empty((l, l), dtype=object)
            for s in range(l):                    # segsum: a masked running sum down column s
                seg = zero()
                for t in range(l):
                    seg = seg + (dA[t] if t > s else 0.0)
                    decay = seg.exp()                  # computed everywhere, then masked
                    mask[t, s] = decay if t >= s else Counted(0.0)
            cb = matmul(C, B.T)
            weighted = np.array([[mask[t, s] * cb[t, s] for s in range(l)] for t in range(l)])
            dtx = np.array([[dt[t] * x[t, j] for j in range(p.headdim)] for t in range(l)])
            yq = matmul(weighted, dtx)
            y_quad[b, :, h] = plain(np.array([[yq[t, j] + D * x[t, j] for j in range(p.headdim)]
                                              for t in range(l)]))
            quad += Counted.ops
    ref = reference.ssd_recurrent(**a)
    np.testing.assert_allclose(y_rec, ref, atol=1e-12)
    np.testing.assert_allclose(y_quad, ref, atol=1e-12)
    assert cost.recurrent_cost(p).flops == rec
    assert cost.quadratic_cost(p).flops == quad


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_bytes_match_the_arrays_each_stage_touches(shape, dtype):
    p = problem({**shape, "dtype": np.dtype(dtype).name})
    a = {k: v.astype(dtype) for k, v in
         inputs(**{k: v for k, v in shape.items() if k != "chunk_size"}).items()}
    f32 = np.dtype(np.float32).itemsize
    per_head_B = np.repeat(a["B"], p.nheads // p.ngroups, axis=2)

    dA_cumsum, dt_c = reference.chunk_cumsum(a["dt"], a["A"].astype(np.float64), p.chunk_size)
    stage1 = cost.chunk_cumsum_cost(p)
    assert stage1.bytes_read == a["dt"].nbytes
    assert stage1.bytes_written == (dA_cumsum.size + dt_c.size) * f32

    chunk_states, final = reference.fwd_pass_state(a["x"], a["B"], dt_c, dA_cumsum)
    stage2 = cost.fwd_pass_state_cost(p)
    assert stage2.bytes_read == (a["x"].nbytes + per_head_B.nbytes
                                 + (dA_cumsum.size + dt_c.size) * f32)
    assert stage2.bytes_written == (chunk_states.size + final.size) * f32

    y = reference.compute_out(a["x"], dt_c, dA_cumsum, a["B"], a["C"], chunk_states)
    stage3 = cost.compute_out_cost(p)
    assert stage3.bytes_read == (a["x"].nbytes + 2 * per_head_B.nbytes
                                 + (dA_cumsum.size + dt_c.size + chunk_states.size) * f32)
    assert stage3.bytes_written == y.astype(dtype).nbytes

    assert cost.minimal_bytes(p) == (a["x"].nbytes + a["dt"].nbytes + a["B"].nbytes
                                     + a["C"].nbytes + y.astype(dtype).nbytes)


def test_minimal_bytes_is_a_floor_and_the_quadratic_term_grows_as_seqlen_squared():
    small = Problem(batch=1, seqlen=1024, nheads=8, headdim=64, dstate=64, chunk_size=128)
    big = Problem(batch=1, seqlen=8192, nheads=8, headdim=64, dstate=64, chunk_size=128)
    for p in (small, big):
        for c in (cost.chunked_cost(p), cost.recurrent_cost(p), cost.quadratic_cost(p)):
            assert c.bytes >= cost.minimal_bytes(p)
    ratio = (cost.quadratic_cost(big).bytes / cost.quadratic_cost(small).bytes)
    assert 50 < ratio <= 64                     # 8x longer: ~64x the traffic
    assert cost.chunked_cost(big).flops == 8 * cost.chunked_cost(small).flops


def test_padding_counts_whole_chunks_and_cost_adds_up():
    p = Problem(batch=1, seqlen=300, nheads=2, headdim=4, dstate=8, chunk_size=64)
    assert (p.nchunks, p.padded_seqlen) == (5, 320)
    total = cost.chunked_cost(p)
    stages = cost.chunked_costs(p).values()
    assert total.flops == sum(c.flops for c in stages)
    assert total.bytes == sum(c.bytes for c in stages)
    assert total.intensity == total.flops / total.bytes


def test_cost_table_names_every_stage():
    table = cost.cost_table(Problem(batch=1, seqlen=4096, nheads=24, headdim=64, dstate=128))
    for name in ("chunk_cumsum", "fwd_pass_state", "compute_out", "recurrent", "quadratic",
                 "minimal bytes"):
        assert name in table
