"""Child-side runners of the ascend-compile backend.

They run in the sandbox child (`worker/children.py`) under the
ascend-compile virtualenv's interpreter (torch, triton-ascend, numpy<2), so
this module imports only the standard library, torch, triton and SAGE's pure
child-side modules.

- `InterpretedRun` (with TRITON_INTERPRET=1): wraps the standard correctness
  run in the candidate process, recording every `@triton.jit` launch on the way (kernel, argument
  signature, constexprs, grid). A launch whose grid exceeds 65535 in a
  dimension is refused before the interpreter runs it: the device would
  refuse it too ("coreDim ... can't be greater than UINT16_MAX").
- `run_compile` (no interpreter): lowers each recorded launch with
  `triton.compile` for the Ascend target and runs `bishengir-compile` on the
  `.ttadapter` module that leaves behind. The parent classifies the output.
"""

from __future__ import annotations

import glob
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

from sage_engine.evaluation.child.fidelity import ascend_ops
from sage_engine.evaluation.child.fidelity.autotune import COMPILE_OPTIONS, describe, install_decorators, unwrap_kernel
from sage_engine.evaluation.child.fidelity.run import InterpreterChecks
from sage_engine.evaluation.protocol import Event, Fail, HookReport, Request

MAX_GRID = 65535
BISHENGIR_TIMEOUT_S = 120.0  # one kernel's lowering; the evaluation's own deadline bounds the whole step
CANDIDATE_FILE = "candidate.py"
SIG_BY_DTYPE = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "bool": "i1",
}


class GridTooLarge(Exception):
    def __init__(self, kernel: str, grid: tuple[int, ...], line: int | None):
        super().__init__(
            f"grid {tuple(grid)} of kernel {kernel} exceeds {MAX_GRID} programs in a dimension; "
            "launch one program per core and loop over blocks inside the kernel"
        )
        self.kernel, self.grid, self.line = kernel, grid, line


def def_line(fn: Any) -> int | None:
    """1-based line of a kernel's `def` (decorators skipped)."""
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    for i, text in enumerate(lines):
        if text.lstrip().startswith("def "):
            return start + i
    return start


def arg_signature(value: Any) -> str | None:
    """Triton signature type of a runtime argument; None for a constant."""
    import torch

    if isinstance(value, torch.Tensor):
        name = str(value.dtype).replace("torch.", "")
        return "*" + SIG_BY_DTYPE.get(name, name)
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return None


def specialization_of(value: Any) -> str:
    """How Triton's JIT specializes a runtime argument: "1" (an int equal to 1
    becomes a constant), "D" (divisible by 16: an aligned pointer or int), "N"."""
    if isinstance(value, int) and not isinstance(value, bool):
        return "1" if value == 1 else "D" if value % 16 == 0 else "N"
    if hasattr(value, "data_ptr"):
        return "D" if value.data_ptr() % 16 == 0 else "N"
    return "N"


class _Pointer:
    """A stand-in argument with a pointer's alignment, for the attrs descriptor."""

    def __init__(self, aligned: bool):
        self._ptr = 16 if aligned else 17

    def data_ptr(self) -> int:
        return self._ptr


def specialized(fn: Any, launch: dict[str, Any], target: Any) -> tuple[dict, dict, Any]:
    """(signature, constants, attrs) as a device launch with these arguments
    compiles them: an int argument equal to 1 is a constant and aligned
    arguments carry tt.divisibility, as Triton's JIT specializes them. Without
    this a unit stride stays a runtime value and the lowering is not the one
    the device builds (tutorial 05's matmul then overflows the UB)."""
    from triton.compiler.compiler import make_backend

    signature, constants = dict(launch["signature"]), dict(launch["constants"])
    spec = launch.get("specialization") or {}
    if not spec:
        return signature, constants, None
    values = []
    for param in fn.params:
        name = param.name
        kind, sig = spec.get(name), signature.get(name, "constexpr")
        if sig == "constexpr" or kind is None:
            values.append(constants.get(name))
        elif sig.startswith("*"):
            values.append(_Pointer(kind == "D"))
        else:
            values.append({"1": 1, "D": 16}.get(kind, 3))
    attrs = make_backend(target).get_attrs_descriptor(fn.params, values)
    for num, value in attrs.get_constants().items():
        constants[fn.params[num].name] = value
    return signature, constants, attrs


class LaunchRecorder:
    """Wraps the interpreter's GridExecutor to record launches."""

    def __init__(self, candidate_path: str):
        self.candidate_path = os.path.abspath(candidate_path)
        self.launches: dict[str, dict[str, Any]] = {}
        self.grid_error: GridTooLarge | None = None
        self._raw: dict[int, Any] = {}

    def install(self) -> None:
        from triton.runtime import interpreter

        recorder = self
        original_rewrite = interpreter.InterpretedFunction.rewrite
        original_call = interpreter.GridExecutor.__call__

        # GridExecutor only sees the rewritten function; keep the user's one
        # so names, lines and the compile step refer to the candidate source.
        def rewrite(self: Any) -> Any:
            fn = original_rewrite(self)
            recorder._raw[id(fn)] = self.fn
            return fn

        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            recorder.record(self, interpreter.RESERVED_KWS, args, kwargs)
            # Compile options (multibuffer=...) are recorded above; the interpreter takes kernel arguments only.
            params = set(inspect.signature(self.fn).parameters)
            kwargs = {k: v for k, v in kwargs.items() if k in params or k in interpreter.RESERVED_KWS or k == "warmup"}
            return original_call(self, *args, **kwargs)

        interpreter.InterpretedFunction.rewrite = rewrite
        interpreter.GridExecutor.__call__ = call

    def record(self, executor: Any, reserved: list[str], args: tuple, kwargs: dict, *, config: Any = None, run: bool = True) -> None:
        params = set(inspect.signature(executor.fn).parameters)
        plain = {k: v for k, v in kwargs.items() if k not in reserved and k != "warmup" and k in params}
        # Compile options a launch or an autotune config carries (multibuffer=False) change the Ascend build.
        options = {
            k: v
            for k, v in kwargs.items()
            if k in COMPILE_OPTIONS and k not in params and k not in reserved and isinstance(v, (bool, int, str))
        }
        bound = inspect.getcallargs(executor.fn, *args, **plain)
        raw = self._raw.get(id(executor.fn), executor.fn)
        name = getattr(raw, "__name__", "kernel")
        qualname = getattr(raw, "__qualname__", name)
        grid = executor.grid(bound) if callable(executor.grid) else executor.grid
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        signature: dict[str, str] = {}
        constants: dict[str, Any] = {}
        specialization: dict[str, str] = {}
        for arg, value in bound.items():
            sig = None if arg in executor.constexprs else arg_signature(value)
            if sig is None:
                signature[arg] = "constexpr"
                constants[arg] = value if isinstance(value, (int, float, bool, str, type(None))) else repr(value)
            else:
                signature[arg] = sig
                specialization[arg] = specialization_of(value)
        key = json.dumps([qualname, signature, constants, options, specialization], sort_keys=True, default=repr)
        entry = self.launches.setdefault(
            key,
            {
                "kernel": name,
                "qualname": qualname,
                "def_line": def_line(raw),
                "signature": signature,
                "constants": constants,
                "grid": list(grid),
                "launches": 0,
                "specialization": specialization,
            },
        )
        if options:
            entry["options"] = options
        if config is not None:
            entry["config"] = describe(config)
            entry["autotune"] = qualname
        if not run:
            return
        entry["launches"] += 1
        entry["grid"] = [max(a, b) for a, b in zip(entry["grid"], grid)]
        if max(grid) > MAX_GRID:
            self.grid_error = GridTooLarge(name, grid, self.launch_line() or entry["def_line"])
            raise self.grid_error

    def launch_line(self) -> int | None:
        for frame in reversed(traceback.extract_stack()):
            if os.path.abspath(frame.filename) == self.candidate_path:
                return frame.lineno
        return None


# triton-ascend's language patches define their own max/min/argmax combine
# functions, which the interpreter's numpy fast path does not recognise: it
# then reduces one element at a time in Python (~0.1 ms per element, minutes
# for a softmax). The same reductions, by name, go to numpy instead.
_FAST_REDUCTIONS = {
    "_elementwise_max_default": ("max", None),
    "_elementwise_max_propagate_nan": ("max", None),
    "_elementwise_max": ("max", None),
    "_elementwise_min": ("min", None),
    "_elementwise_min_default": ("min", None),
    "_elementwise_min_propagate_nan": ("min", None),
    "_argmax_combine_tie_break_left": ("max", "argmax"),
    "_argmax_combine_tie_break_fast": ("max", "argmax"),
    "_argmin_combine_tie_break_left": ("min", "argmin"),
    "_argmin_combine_tie_break_fast": ("min", "argmin"),
}


def install_fast_reductions() -> None:
    import numpy as np
    from triton.runtime import interpreter

    original = interpreter.ReduceOps.apply_impl

    def apply_impl(self: Any, input: Any) -> Any:
        fn = getattr(self.combine_fn, "fn", self.combine_fn)
        ops = _FAST_REDUCTIONS.get(getattr(fn, "__name__", ""))
        if ops is None:
            return original(self, input)
        val, idx = ops
        return self.min_max(input[0], val_reduce_op=getattr(np, val), idx_reduce_op=getattr(np, idx) if idx else None)

    interpreter.ReduceOps.apply_impl = apply_impl


class InterpretedRun(InterpreterChecks):
    """Around the standard correctness run in the candidate process: the
    interpreter checks (bf16, bounds, autotune), the Ascend extensions, and
    every kernel launch recorded (every config of an autotuned kernel too,
    run or not: the compile step lowers them all); a refused grid is a
    compile error."""

    def __init__(self, request: Request):
        from triton.runtime import interpreter

        install_fast_reductions()
        ascend_ops.install(interpreter)
        self.recorder = LaunchRecorder(str(Path(os.getcwd(), CANDIDATE_FILE)))
        self.recorder.install()
        super().__init__(request)

    def on_config(self, tuner: Any, args: tuple, kwargs: dict, config: Any) -> None:
        from triton.runtime import interpreter

        fn = tuner.fn
        rewritten = fn.rewrite() if hasattr(fn, "rewrite") else fn
        executor = interpreter.GridExecutor(
            rewritten, getattr(fn, "arg_names", None) or list(inspect.signature(rewritten).parameters), kwargs.get("grid")
        )
        meta = {**{k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}, **config.all_kwargs()}
        self.recorder.record(executor, interpreter.RESERVED_KWS, args, meta, config=config, run=False)

    def extras(self) -> HookReport:
        return (super().extras() or HookReport()).merged(HookReport(launches=list(self.recorder.launches.values())))

    def finish(self, event: Event) -> Event:
        """The candidate process's last event, with the launches recorded (a refused grid: a compile error)."""
        err = self.recorder.grid_error
        if err is not None:
            return Fail(
                status="compile_error",
                message=str(err),
                hook=self.extras(),
                diagnostics=[
                    {
                        "category": "grid_too_large",
                        "message": str(err),
                        "line": err.line,
                        "kernel": err.kernel,
                        "severity": "error",
                        "column": None,
                    }
                ],
            )
        return super().finish(event)


# ----------------------------------------------------------------------- compile


def _load_candidate(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("candidate", path)
    if spec is None or spec.loader is None:  # a .py path always has a spec and a loader
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = module
    spec.loader.exec_module(module)
    return module


def _find_kernel(module: Any, qualname: str) -> Any:
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def compile_launch(module: Any, launch: dict[str, Any], args: dict[str, Any], index: int) -> dict[str, Any]:
    """Lower one launch for the Ascend target; return the raw compiler record."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.errors import CompilationError

    out: dict[str, Any] = {
        "kernel": launch["kernel"],
        "def_line": launch.get("def_line"),
        "stage": None,
        "returncode": None,
        "output": "",
        "line": None,
    }
    fn = unwrap_kernel(_find_kernel(module, launch["qualname"]))
    if fn is None or not hasattr(fn, "src"):
        out.update(
            stage="lookup",
            output=(
                f"kernel {launch['qualname']} is not a module-level @triton.jit function; "
                "the compile gate can only lower kernels defined at module level"
            ),
        )
        return out
    workdir = os.getcwd()
    cache = os.path.join(workdir, f"triton-cache-{index}")
    os.environ["TRITON_CACHE_DIR"] = cache
    target = GPUTarget("npu", args["chip"], 0)
    options = dict(launch.get("options") or {})
    try:
        signature, constants, attrs = specialized(fn, launch, target)
        src = ASTSource(fn, signature, constants, attrs)
        triton.compile(src, target=target, options=options or None)
    except CompilationError as exc:
        # Python -> TTIR errors: node.lineno counts from the kernel's `def`.
        node = getattr(exc, "node", None)
        line = None
        if node is not None and getattr(node, "lineno", None) and launch.get("def_line") and exc.src == fn.src:
            line = launch["def_line"] + node.lineno - 1
        out.update(stage="ttir", output=str(exc)[-6000:], line=line)
        return out
    except Exception as exc:  # noqa: BLE001 - every compiler failure is a verdict
        stage = getattr(exc, "stage_name", None)
        if stage != "ConvertLinalgRToBinary":
            out.update(stage="linalg" if stage else "ttir", output=f"{type(exc).__name__}: {exc}"[-6000:])
            return out
    # Without CANN triton.compile always stops at the binary step; the
    # linalg/HIVM module it wrote on the way is what bishengir-compile needs.
    found = sorted(glob.glob(os.path.join(cache, "**", "*.ttadapter"), recursive=True))
    if not found:
        out.update(stage="linalg", output="triton.compile wrote no .ttadapter module")
        return out
    cmd = [
        args["bishengir"],
        found[0],
        f"--target={args['chip']}",
        *bishengir_flags(args["bishengir_flags"], options),
        "-o",
        os.path.join(workdir, f"kernel-{index}"),
    ]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=BISHENGIR_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        out.update(stage="bishengir", returncode=-1, output="bishengir-compile did not finish in time")
        return out
    out.update(stage="bishengir", returncode=proc.returncode, output=proc.stdout[-8000:])
    return out


# Launch or autotune-config options that triton-ascend turns into bishengir-compile flags.
OPTION_FLAGS = {"multibuffer": "--enable-auto-multi-buffer", "enable_auto_bind_sub_block": "--enable-auto-bind-sub-block"}


def bishengir_flags(defaults: list[str], options: dict[str, Any]) -> list[str]:
    """The default flags, with those a launch's options set replaced (multibuffer=False...)."""
    flags = list(defaults)
    for option, flag in OPTION_FLAGS.items():
        if option in options:
            flags = [f for f in flags if not f.startswith(flag + "=")] + [f"{flag}={bool(options[option])}"]
    return flags


def run_compile(request: Request, emit: Any) -> dict[str, Any]:
    """Lower every recorded launch (`runner_args`: launches, chip, bishengir, bishengir_flags); one record per launch."""
    args = request.runner_args
    path = str(Path(os.getcwd(), CANDIDATE_FILE))
    Path(path).write_text(request.candidate_source, encoding="utf-8")
    install_decorators()
    module = _load_candidate(path)
    launches = args["launches"]
    kernels = []
    for i, launch in enumerate(launches):
        emit.progress(i, len(launches), f"lowering {launch['kernel']} for {args['chip']}")
        try:
            kernels.append(compile_launch(module, launch, args, i))
        except Exception as exc:  # noqa: BLE001 - reported as category "other"
            kernels.append(
                {
                    "kernel": launch["kernel"],
                    "def_line": launch.get("def_line"),
                    "stage": "internal",
                    "returncode": None,
                    "line": None,
                    "output": "".join(traceback.format_exception(exc))[-4000:],
                }
            )
    return {"status": "compiled", "kernels": kernels}
