"""tapejit: native, fused, vectorised gradients of numpy-style functions.

    import tapejit as tj
    grad = tj.compile(f, example_x)   # trace -> reverse mode -> passes -> LLVM -> machine code
    g = grad(x)                       # the gradient, computed by native code
    grad(x, out=g)                    # writes into g; creates no array

See README.md and the documentation site (docs/) for the pipeline; every stage prints with
``grad.ir(stage)``.
"""

import numpy  # noqa: F401  (first: its import is ~30 ms faster before dataclasses/inspect/typing)

from . import ad  # noqa: F401  (registers into the core's tables the rules that need a transformation)
from .frontend.control import checkpoint, fori_loop, scan, while_loop
from .frontend.custom import custom_jvp, custom_vjp, stop_gradient
from .api import (
    STAGES,
    GradientFunction,
    GuardError,
    GuardWarning,
    MaxStepsError,
    MaxStepsWarning,
    compile,
    grad,
    hessian,
    hvp,
    jacfwd,
    jacobian,
    jacrev,
    jit,
    jvp,
    value_and_grad,
    vjp,
)
from .core.ir import VerifyError
from .core.ops import RuleError
from .runtime.export import ExportedGradient, SharedLibraryError
from .runtime.pickling import GradientUnpicklingError
from .frontend.tracing import TracingError, where
from .vmap import vmap

__version__ = "0.1.0"

__all__ = [
    "STAGES",
    "ExportedGradient",
    "GradientFunction",
    "GradientUnpicklingError",
    "GuardError",
    "GuardWarning",
    "MaxStepsError",
    "MaxStepsWarning",
    "RuleError",
    "SharedLibraryError",
    "TracingError",
    "VerifyError",
    "checkpoint",
    "compile",
    "custom_jvp",
    "custom_vjp",
    "fori_loop",
    "grad",
    "hessian",
    "hvp",
    "jacfwd",
    "jacobian",
    "jacrev",
    "jit",
    "jvp",
    "scan",
    "stop_gradient",
    "value_and_grad",
    "vjp",
    "vmap",
    "where",
    "while_loop",
]
