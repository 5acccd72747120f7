"""An op that is one backend hook: the recipe says which hook and how the op's tensors map
to its arguments and back; the executor calls the hook on the backend the plan chose.

So a recipe never holds a backend for such an op (docs/ARCHITECTURE.md: the backend
choice goes from the executor straight to the kernel). An op that needs several hooks in
a loop (NITI's `join`) stays a plain function(backend, op, env, ctx).

    conv_fwd = Kernel("conv2d_requant_s8", conv_fwd_args, conv_fwd_result)

- `args(op, env, ctx)`: the hook's positional arguments;
- `result(op, env, ctx, out)`: {tensor name: value} from what the hook returned;
- `hook=None` (`Kernel.local(fn)`): the op runs in the recipe without a backend
  (a reshape, a mask applied to an error): `result(op, env, ctx, None)`.

Calling a Kernel as function(backend, op, env, ctx) runs the same thing, so code that
wraps or replaces an op function (tests, spies) sees the old signature.
"""
from __future__ import annotations


class Kernel:
    __slots__ = ("hook", "args", "result")

    def __init__(self, hook: str | None, args, result):
        self.hook, self.args, self.result = hook, args, result

    @classmethod
    def local(cls, result) -> "Kernel":
        """An op run by the recipe alone: `result(op, env, ctx, None)` -> outputs."""
        return cls(None, None, result)

    def __call__(self, backend, op, env, ctx) -> dict:
        """The op on `backend`, as an op function (the executor makes the same calls itself)."""
        if self.hook is None:
            return self.result(op, env, ctx, None)
        return self.result(op, env, ctx, getattr(backend, self.hook)(*self.args(op, env, ctx)))

    def __repr__(self) -> str:
        return f"Kernel({self.hook or 'local'}: {getattr(self.result, '__qualname__', self.result)})"
