"""`and` / `or` on Triton tensors in the interpreter, as the compiler reads them.

The compiler turns `mask_a and mask_b` into an elementwise `logical_and`
(upstream deprecates the spelling but still compiles it so, and kernels in
the wild, triton-ascend's own tutorials among them, use it). The interpreter
runs the kernel as Python, where `a and b` on a block returns `b` whole:
the left mask vanishes, a tail that the device never touches is loaded,
and the bounds check then blames the kernel for a read the hardware would
not make. The kernel's AST is rewritten before the interpreter executes it
so each boolean operator folds its operands as the code generator does:
plain Python values (constexprs) short-circuit, tensors are combined
elementwise, operands are evaluated in order.
"""

from __future__ import annotations

import ast
from typing import Any, Callable

from sage_engine.evaluation.child.fidelity import once_per_module

HELPER = "_sage_bool_op"


def bool_op(is_and: bool, *operands: Callable[[], Any]) -> Any:
    """Fold `operands` (thunks, left to right) as Triton's code generator folds a BoolOp."""
    import triton.language as tl

    tensors: list[Any] = []
    value: Any = None
    for thunk in operands:
        value = thunk()
        if isinstance(value, tl.tensor):
            tensors.append(value)
            continue
        truthy = bool(value)
        if is_and and not truthy or not is_and and truthy:
            return value
    if not tensors:
        return value
    result = tensors[0]
    for other in tensors[1:]:
        result = result.logical_and(other) if is_and else result.logical_or(other)
    return result


@once_per_module
def install(interpreter: Any) -> None:
    """Make the interpreter's AST rewrite fold `and`/`or` elementwise."""
    rewriter = interpreter.FunctionRewriter
    base = type(rewriter.ast_transformer)

    # Its base is the interpreter's own transformer class, known only once
    # triton is loaded: no static type names it.
    class ElementwiseBoolOps(base):  # type: ignore[misc, valid-type]
        def visit_Assign(self, node: ast.Assign) -> ast.AST:
            # The interpreter's own visit_Assign wraps the value without visiting it.
            node.value = self.visit(node.value)
            return super().visit_Assign(node)

        def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
            self.generic_visit(node)
            thunks = [
                ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]), body=value)
                for value in node.values
            ]
            call = ast.Call(
                func=ast.Name(id=HELPER, ctx=ast.Load()), args=[ast.Constant(value=isinstance(node.op, ast.And)), *thunks], keywords=[]
            )
            return ast.copy_location(call, node)

    rewriter.ast_transformer = ElementwiseBoolOps()
    # The rewritten kernel runs in its module's globals, filled from the interpreter's.
    setattr(interpreter, HELPER, bool_op)
