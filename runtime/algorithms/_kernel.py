"""How a recipe's op meets a backend without holding it: the recipe says which hooks and
how the op's tensors map to their arguments and back; the executor calls the hooks on
the backend the plan chose (docs/ARCHITECTURE.md: the backend choice goes from the
executor straight to the kernel, never through the recipe).

An op is one of:

- `Kernel(hook, args, result)`: one backend hook.
    conv_fwd = Kernel("conv2d_requant_s8", conv_fwd_args, conv_fwd_result)
  `args(op, env, ctx)` the hook's positional arguments; `result(op, env, ctx, out)`
  {tensor name: value} from what the hook returned.
- `Kernel.local(result)`: no backend at all (a reshape, a mask applied to an error):
  `result(op, env, ctx, None)`.
- `Program(steps)`: several hooks with the recipe's arithmetic between them (a quantizer's
  range then its rounding, NITI's `join` adding errors in a loop, the emulated recipes'
  products and updates). `steps(op, env, ctx)` is a generator that yields each hook call
  as a tuple `(hook, *args)`, is sent the hook's result, and returns the op's outputs:

      def quantize(x, bits):
          top = yield ("absmax_f", x)
          q = yield ("quantize_f", x, step_for(top, bits), bits, "round", None)
          return Scaled(q, step_for(top, bits))

  Helpers compose with `yield from`. A hook the backend does not have (it raises
  NotImplementedError) makes the executor hand the op on to the next backend, as
  NoSupport does.

Calling any of them as function(backend, op, env, ctx) runs the same thing (`run_steps`
here plays the executor), so code that wraps or replaces an op function (tests, spies)
sees the old signature.
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


class Program:
    """An op of several hook calls: `steps(op, env, ctx)`, a generator (above)."""

    __slots__ = ("steps",)
    hook = True     # execute/bound.kernel_hook: the executor runs the generator's calls itself

    def __init__(self, steps):
        self.steps = steps

    def __call__(self, backend, op, env, ctx) -> dict:
        """The op on `backend`, as an op function."""
        return run_steps(backend, self.steps(op, env, ctx))

    def __repr__(self) -> str:
        return f"Program({getattr(self.steps, '__qualname__', self.steps)})"


def run_steps(backend, steps):
    """The value generator `steps` returns, its yielded hook calls made on `backend`: what
    the executor does (execute/bound.run_program), for tests and helpers called outside a step.
    (The executor keeps its own loop so that a step's backend never passes through this
    room: tests/e2e/test_backend_route.py counts the rooms it reaches.)"""
    try:
        call = next(steps)
        while True:
            call = steps.send(getattr(backend, call[0])(*call[1:]))
    except StopIteration as done:
        return done.value
