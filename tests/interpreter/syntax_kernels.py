"""Kernels with Python syntax cuTile's front end rejects, for test_syntax.py.

The line each error must point at ends with `# rejected`. `allowed_syntax` uses what cuTile
does accept, around the same ideas.
"""
from mamba2_tile.tile import ct


@ct.kernel
def list_of_tiles(x, y, TILE: ct.Constant[int]):
    tiles = []  # rejected
    for i in range(2):
        tiles.append(ct.load(x, index=(i,), shape=(TILE,)))
    ct.store(y, index=(0,), tile=tiles[0] + tiles[1])


@ct.kernel
def list_comprehension(x, y, TILE: ct.Constant[int]):
    tiles = [ct.load(x, index=(i,), shape=(TILE,)) for i in range(2)]  # rejected
    ct.store(y, index=(0,), tile=tiles[0] + tiles[1])


@ct.kernel
def python_assert(x, y, TILE: ct.Constant[int]):
    t = ct.load(x, index=(0,), shape=(TILE,))
    assert TILE > 0  # rejected
    ct.store(y, index=(0,), tile=t)


@ct.kernel
def try_except(x, y, TILE: ct.Constant[int]):
    try:  # rejected
        t = ct.load(x, index=(0,), shape=(TILE,))
    except ValueError:
        t = ct.zeros((TILE,), dtype=ct.float32)
    ct.store(y, index=(0,), tile=t)


@ct.kernel
def for_else(x, y, TILE: ct.Constant[int]):
    t = ct.zeros((TILE,), dtype=ct.float32)
    for i in range(2):
        t = t + ct.load(x, index=(i,), shape=(TILE,))
    else:
        t = t * 2.0  # rejected
    ct.store(y, index=(0,), tile=t)


@ct.kernel
def tuple_of_a_range(x, y, TILE: ct.Constant[int]):
    tiles = tuple(ct.load(x, index=(i,), shape=(TILE,)) for i in range(2))  # rejected
    ct.store(y, index=(0,), tile=tiles[0] + tiles[1])


@ct.kernel
def dict_of_tiles(x, y, TILE: ct.Constant[int]):
    tiles = {"a": ct.load(x, index=(0,), shape=(TILE,))}  # rejected
    ct.store(y, index=(0,), tile=tiles["a"])


@ct.function
def helper_with_list(t):
    parts = [t, t]  # rejected
    return parts[0] + parts[1]


@ct.kernel
def calls_a_bad_helper(x, y, TILE: ct.Constant[int]):
    ct.store(y, index=(0,), tile=helper_with_list(ct.load(x, index=(0,), shape=(TILE,))))


@ct.kernel
def allowed_syntax(x, y, TILE: ct.Constant[int]):
    tiles = tuple(ct.load(x, index=(i,), shape=(TILE,)) for i in ct.static_iter(range(2)))
    total = tiles[0] + tiles[1]

    def twice(t):
        return t + t

    half = lambda t: t * 0.5  # noqa: E731  (a lambda is tile code too)
    n = ct.static_eval(len([1, 2]))     # static_eval's argument is plain Python
    total = half(twice(total)) if n == 2 else total
    total += 0.0
    ct.store(y, index=(0,), tile=total)
