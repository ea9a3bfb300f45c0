"""Kernels interpreted in several threads at once give the single-threaded results (#15 item 1).

The running block used to be one process-wide variable, so a thread switch inside a kernel
let one launch read another's `ct.bid`: silently wrong `y` or bogus tile-index errors. A tiny
switch interval makes the interpreter switch threads between almost every bytecode.
"""
import sys
import threading

import numpy as np
import pytest
import torch

from mamba2_tile.api import mamba_chunk_scan_combined
from mamba2_tile.interpreter import launch

from . import kernels


@pytest.fixture
def frequent_switches():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def run_in_threads(jobs):
    """Run every job in its own thread, all started together; return their results in order."""
    results, errors = [None] * len(jobs), []
    start = threading.Barrier(len(jobs))

    def work(i):
        start.wait()
        try:
            results[i] = jobs[i]()
        except Exception as error:      # re-raised below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def test_grids_of_different_sizes(frequent_switches):
    rng = np.random.default_rng(0)

    def job(n):
        a, b = rng.normal(size=n * 16).astype(np.float32), np.ones(n * 16, np.float32)
        c = np.zeros_like(a)
        launch((n,), kernels.vector_add, (a, b, c, 16))
        return c, a + b

    for c, expected in run_in_threads([lambda n=n: job(n) for n in (3, 7, 11, 5)]):
        np.testing.assert_array_equal(c, expected)


def test_api_calls_match_single_threaded(frequent_switches):
    generator = torch.Generator().manual_seed(0)

    def inputs(seqlen, nheads):
        def randn(*shape):
            return torch.randn(*shape, generator=generator)
        return dict(x=randn(1, seqlen, nheads, 4), dt=torch.rand(1, seqlen, nheads,
                                                                 generator=generator) * 0.2,
                    A=-torch.rand(nheads, generator=generator) - 0.2,
                    B=randn(1, seqlen, 1, 4), C=randn(1, seqlen, 1, 4))

    problems = [inputs(seqlen, nheads) for seqlen, nheads in ((70, 2), (20, 1), (130, 3))]
    alone = [mamba_chunk_scan_combined(chunk_size=64, **p) for p in problems]
    together = run_in_threads([lambda p=p: mamba_chunk_scan_combined(chunk_size=64, **p)
                               for p in problems])
    for y, expected in zip(together, alone):
        assert torch.equal(y, expected)
