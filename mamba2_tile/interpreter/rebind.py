"""Run a kernel's own Python function with `ct` meaning the interpreter.

The kernel source is never copied or edited. We take the function object cuTile keeps
(`kernel._pyfunc`) and build a twin that shares its code object but looks its globals up
in a copy of its module's namespace where every reference to cuTile is swapped for the
interpreter's version (api.py):

* the module `cuda.tile` (however it was imported: `ct`, `mamba2_tile.tile.ct`, `cuda`),
* names imported from it (`from cuda.tile import load`, `ct.float32` stored in a global),
* helper functions the kernel calls, `@ct.function` or plain, rebound the same way, so
  their own `ct` references are swapped too (recursively).

Each function is first checked for syntax cuTile rejects (syntax.py), once per code object.

Only globals the code actually names (its `co_names`, nested code included) are looked
at, and a function that names nothing cuTile-related is used as is. Twins are cached per
function and rebuilt when one of those globals (or closure values) now holds another object:
a helper redefined in a notebook cell is what the next launch runs, whether or not cuda-tile
is installed (the twin's globals are a copy, so without this check it kept the old helper
exactly when cuda-tile was there to be swapped out).

Rebinding runs under one lock: while a function is being rebound the cache holds the
function itself (to stop a cycle), and another thread launching at that moment must wait
for the twin rather than run the kernel against real cuTile.
"""
import threading
import types
import weakref

from . import api
from .syntax import check_syntax

try:
    import cuda.tile as _real_tile
except ImportError:     # no cuda-tile here: kernels already see api through mamba2_tile.tile
    _real_tile = None

# Code objects of every function run as tile code, so errors can point at kernel lines.
TILE_CODE = set()
_syntax_checked = set()     # code objects already through check_syntax

_cache = weakref.WeakKeyDictionary()
_swaps = None
_lock = threading.RLock()     # re-entrant: rebinding a kernel rebinds its helpers


def _swap_table():
    """id(real cuda.tile object) -> interpreter object, built on first use."""
    global _swaps
    with _lock:
        if _swaps is None:
            _swaps = _build_swap_table()
    return _swaps


def _build_swap_table():
    swaps = {id(api): api}
    if _real_tile is not None:
        swaps[id(_real_tile)] = api
        for name in api.__all__:
            if hasattr(_real_tile, name):
                swaps[id(getattr(_real_tile, name))] = getattr(api, name)
    return swaps


def translate(value):
    """The object a kernel should see in place of `value`."""
    swapped = _swap_table().get(id(value))
    if swapped is not None:
        return swapped
    if isinstance(value, types.ModuleType) and value.__name__ == "cuda" and _real_tile:
        return types.SimpleNamespace(tile=api)     # `import cuda.tile` binds `cuda`
    if isinstance(value, types.FunctionType):
        # cuTile's @ct.function wraps the function; run the wrapped one.
        if getattr(value, "_cutile_function_wrapper", False):
            value = value.__wrapped__
        return rebind(value)
    return value


def _names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
            TILE_CODE.add(const)
    return names


def rebind(func):
    """`func` with its cuTile references swapped for the interpreter's (cached)."""
    with _lock:
        return _rebind(func)


_EMPTY = object()     # stands for an empty closure cell in a function's inputs


def _rebind(func):
    cached = _cache.get(func)
    if cached is not None and cached[1] is None:
        return cached[0]         # being rebound further up: cuTile forbids recursion anyway
    _cache[func] = (func, None)
    try:
        twin, inputs = _twin(func, cached)
    except BaseException:
        if cached is None:
            del _cache[func]
        else:
            _cache[func] = cached
        raise
    _cache[func] = (twin, inputs)
    return twin


def _twin(func, cached):
    """`(twin, inputs)`: `inputs` are what the twin was built from (the translated globals the
    code names, closure contents and defaults); the cached twin is reused while they are the
    same objects, so a helper redefined after a launch is seen by the next one."""
    if func.__code__ not in _syntax_checked:
        check_syntax(func)              # a kernel or helper that cuTile would not compile
        _syntax_checked.add(func.__code__)
    TILE_CODE.add(func.__code__)
    namespace = func.__globals__
    names = tuple(sorted(name for name in _names(func.__code__) if name in namespace))
    values = tuple(translate(namespace[name]) for name in names)
    cells = tuple(_translate_cell(cell) for cell in func.__closure__ or ())
    defaults = tuple(translate(d) for d in func.__defaults__ or ())
    inputs = (names, values + cells + defaults)
    if cached is not None and cached[1][0] == names and _same(cached[1][1], inputs[1]):
        return cached[0], inputs
    originals = (tuple(namespace[name] for name in names)
                 + tuple(_cell_contents(cell) for cell in func.__closure__ or ())
                 + (func.__defaults__ or ()))
    if _same(inputs[1], originals):
        return func, inputs
    swaps = {name: new for name, new in zip(names, values) if new is not namespace[name]}
    closure = func.__closure__ and tuple(
        cell if new is _cell_contents(cell) else types.CellType(new)
        for cell, new in zip(func.__closure__, cells))
    twin = types.FunctionType(func.__code__, {**namespace, **swaps}, func.__name__,
                              func.__defaults__ and defaults, closure)
    twin.__kwdefaults__ = func.__kwdefaults__
    twin.__qualname__ = func.__qualname__
    twin.__dict__.update(func.__dict__)
    return twin, inputs


def _same(items, originals):
    return len(items) == len(originals) and all(a is b for a, b in zip(items, originals))


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:          # an empty cell (a name not yet assigned)
        return _EMPTY


def _translate_cell(cell):
    contents = _cell_contents(cell)
    return contents if contents is _EMPTY else translate(contents)
