"""Refuse, before a kernel runs, the Python syntax cuTile's front end refuses.

The interpreter runs a kernel as ordinary Python, which accepts far more than cuTile compiles: a
kernel that builds a list (`tiles = []; tiles.append(t)`), catches an exception or asserts
would run on a laptop and then fail to compile on the GPU. cuTile turns the kernel's source
into its IR one AST node at a time and raises `TileSyntaxError("Unsupported syntax")` at any
node kind it has no rule for (cuda/tile/_passes/ast2hir.py in cuda-tile 1.7). This module
walks the kernel's AST against the same node kinds and raises the same error class, with the
file, line and source of the offending node.

What it accepts, as cuTile does:

* statements: assignments (to names, tuples of them, subscripts), augmented assignments,
  expression statements, `if`, `for` and `while` (without `else`), `break`, `continue`,
  `return`, `pass`, `with`, nested `def` (without decorators), and `raise` of a
  `static_exception(...)` (without `from`);
* expressions: calls, names, attributes, constants, unary / binary / boolean operators,
  comparisons, `x if c else y`, tuples, subscripts, slices, `lambda`, f-strings (without
  `!r`/`!s`/`!a`, with literal format specs), `*args` in calls and tuples, and a generator
  only as `tuple(... for x in ct.static_iter(...))`.

Arguments of `static_eval`, `static_assert`, `static_iter` and `static_exception` are plain
Python evaluated at compile time, so they are not checked. Functions whose source cannot be
read (defined at a prompt) and lambdas are not checked either.
"""
import ast
import inspect
import textwrap

from .errors import TileSyntaxError

_STATIC = frozenset({"static_eval", "static_assert", "static_iter", "static_exception"})
_STATEMENTS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.For, ast.While, ast.If,
               ast.Continue, ast.Break, ast.Return, ast.With, ast.Pass, ast.Raise,
               ast.FunctionDef)
_EXPRESSIONS = (ast.Call, ast.Name, ast.UnaryOp, ast.BinOp, ast.Compare, ast.Attribute,
                ast.Constant, ast.JoinedStr, ast.Tuple, ast.Subscript, ast.Slice, ast.Lambda,
                ast.BoolOp, ast.IfExp)
# What a learner most often writes instead, said in the message after cuTile's words.
_HINTS = {
    ast.List: "a list: tile code has tuples, not lists",
    ast.ListComp: "a list comprehension: use tuple(... for x in ct.static_iter(...))",
    ast.Dict: "a dict", ast.DictComp: "a dict comprehension", ast.Set: "a set",
    ast.SetComp: "a set comprehension",
    ast.GeneratorExp: "a generator: only tuple(... for x in ct.static_iter(...)) is supported",
    ast.NamedExpr: "an assignment expression (:=)",
    ast.Assert: "assert: use ct.assert_ or ct.static_assert",
    ast.Try: "try", ast.Delete: "del", ast.Import: "import", ast.ImportFrom: "import",
    ast.Global: "global", ast.Nonlocal: "nonlocal", ast.ClassDef: "a class definition",
}


def check_syntax(func) -> None:
    """Raise TileSyntaxError at the first node of `func` that cuTile's front end rejects."""
    if func.__name__ == "<lambda>":
        return
    try:
        lines, first_line = inspect.getsourcelines(func)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):    # no source to read: nothing to check
        return
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, ast.FunctionDef) or definition.name != func.__name__:
        return
    checker = _Checker(func, lines, first_line)
    for default in definition.args.defaults + definition.args.kw_defaults:
        if default is not None:
            checker.expression(default)
    checker.statements(definition.body)


def _name(func):
    """`f` for a call of `f(...)` or `ct.f(...)`."""
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _static_call(node) -> bool:
    """Is `node` a call to one of cuTile's compile-time functions (`ct.static_eval(...)`)?"""
    return isinstance(node, ast.Call) and _name(node.func) in _STATIC


class _Checker:
    def __init__(self, func, lines, first_line):
        self.func, self.lines, self.first_line = func, lines, first_line

    def error(self, node, message="Unsupported syntax"):
        hint = _HINTS.get(type(node))
        if hint and message == "Unsupported syntax":
            message = f"{message} ({hint})"
        line = self.first_line + node.lineno - 1
        source = self.lines[node.lineno - 1].strip()
        raise TileSyntaxError(f"{message}\n  File \"{inspect.getsourcefile(self.func)}\", "
                              f"line {line}, in {self.func.__name__}\n    {source}")

    def statements(self, body):
        for node in body:
            self.statement(node)

    def statement(self, node):
        if not isinstance(node, _STATEMENTS):
            self.error(node)
        if isinstance(node, ast.FunctionDef):
            if node.decorator_list:
                self.error(node.decorator_list[0],
                           "Decorators on nested functions are not supported")
            self.expressions(d for d in node.args.defaults + node.args.kw_defaults if d)
            self.statements(node.body)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                self.target(target)
            self.expression(node.value)
        elif isinstance(node, ast.AnnAssign):
            self.target(node.target)
            if node.value is not None:
                self.expression(node.value)
        elif isinstance(node, ast.AugAssign):
            if not isinstance(node.target, (ast.Name, ast.Subscript)):
                self.error(node.target)
            self.target(node.target)
            self.expression(node.value)
        elif isinstance(node, ast.Expr):
            self.expression(node.value)
        elif isinstance(node, (ast.For, ast.While)):
            if node.orelse:
                keyword = "for" if isinstance(node, ast.For) else "while"
                self.error(node.orelse[0], f"'{keyword}-else' is not supported")
            if isinstance(node, ast.For):
                self.target(node.target)
                self.expression(node.iter)
            else:
                self.expression(node.test)
            self.statements(node.body)
        elif isinstance(node, ast.If):
            self.expression(node.test)
            self.statements(node.body)
            self.statements(node.orelse)
        elif isinstance(node, ast.Return):
            if node.value is not None:
                self.expression(node.value)
        elif isinstance(node, ast.With):
            for item in node.items:
                self.expression(item.context_expr)
                if item.optional_vars is not None:
                    self.target(item.optional_vars)
            self.statements(node.body)
        elif isinstance(node, ast.Raise):
            if node.cause is not None:
                self.error(node.cause, "'raise from' syntax is not supported")
            if not _static_call(node.exc):
                self.error(node, "Raised exception must be wrapped in static_exception()")

    def target(self, node):
        if isinstance(node, ast.Name):
            return
        if isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                self.target(element)
        elif isinstance(node, ast.Subscript):
            self.expression(node.value)
            self.expression(node.slice)
        else:
            self.error(node)

    def expressions(self, nodes):
        for node in nodes:
            if isinstance(node, ast.Starred):
                node = node.value
            self.expression(node)

    def expression(self, node):
        if not isinstance(node, _EXPRESSIONS):
            self.error(node)
        if isinstance(node, ast.Call):
            self.call(node)
        elif isinstance(node, ast.JoinedStr):
            self.f_string(node)
        elif isinstance(node, ast.Lambda):
            self.expressions(d for d in node.args.defaults + node.args.kw_defaults if d)
            self.expression(node.body)
        elif isinstance(node, ast.Tuple):
            self.expressions(node.elts)
        elif not isinstance(node, (ast.Name, ast.Constant)):
            # The remaining kinds (operators, attributes, subscripts, slices, ...) just
            # hold sub-expressions.
            self.expressions(child for child in ast.iter_child_nodes(node)
                             if isinstance(child, ast.expr))

    def call(self, node):
        self.expression(node.func)
        if _static_call(node):
            return
        if (isinstance(node.func, ast.Name) and node.func.id == "tuple" and not node.keywords
                and len(node.args) == 1 and isinstance(node.args[0], ast.GeneratorExp)):
            generator = node.args[0]
            for comprehension in generator.generators:
                if not (_static_call(comprehension.iter)
                        and _name(comprehension.iter.func) == "static_iter"):
                    self.error(comprehension.iter,
                               "All iterables in a tuple comprehension must be wrapped in "
                               "ct.static_iter(), e.g. tuple(... for x in ct.static_iter(...))")
                self.target(comprehension.target)
                self.expressions(comprehension.ifs)
            self.expression(generator.elt)
            return
        self.expressions(node.args)
        self.expressions(keyword.value for keyword in node.keywords)

    def f_string(self, node):
        for part in node.values:
            if isinstance(part, ast.Constant):
                continue
            if part.conversion != -1:
                self.error(part, "f-string: !r, !s, !a conversions are not supported")
            spec = part.format_spec
            if spec is not None and spec.values and not (
                    len(spec.values) == 1 and isinstance(spec.values[0], ast.Constant)):
                self.error(part, "f-string: format spec must be a literal string")
            self.expression(part.value)
