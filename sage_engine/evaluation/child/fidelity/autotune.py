"""`@triton.autotune`, `@libentry` and friends in the interpreter, as the device may run them.

Every `triton.Config` of an autotuned kernel is a kernel the device may pick
(the autotuner's choice depends on timings nobody can predict here), so each
one must be right. The autotuner's own benchmarking needs a device driver
(on a CPU: "0 active drivers"; triton-ascend asks for it when the decorator
runs), so it never runs here. Instead:

- a sample of the configs is checked: all of them up to `limit`, else the
  first, the one with the largest tiles, and evenly spaced others;
- launches of a kernel for one autotuning key rotate through the sample, so
  the reference process judges the first configs itself, one per trial;
- the configs the trials cannot reach run at the first launch on the same
  inputs (each from the same starting memory, as the autotuner's benchmark
  does) and what each wrote is compared with what the kept config wrote,
  under the task's tolerance: a config whose results differ is a wrong
  kernel the device may pick (`ConfigMismatch`);
- `on_config(kernel, args, kwargs, config)` lets a backend see every config,
  run or not (the Ascend gate compiles them all).

`@libentry()` (triton-ascend's launch cache, which imports torch_npu) and
`@libtuner` become the kernel itself and an autotuner; their semantics are
a faster launch path, not different numbers.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable

from sage_engine.evaluation.child.fidelity import once_per_module

# Config kwargs that are compile options on triton-ascend, not kernel arguments.
COMPILE_OPTIONS = (
    "multibuffer",
    "enable_auto_bind_sub_block",
    "num_warps",
    "num_stages",
    "num_ctas",
    "maxnreg",
    "enable_hivm_auto_cv_balance",
    "sync_solver",
    "unit_flag",
    "tile_mix_vector_loop",
    "tile_mix_cube_loop",
    "set_workspace_multibuffer",
    "limit_auto_multi_buffer_only_for_local_buffer",
    "limit_auto_multi_buffer_of_local_buffer",
    "enable_nd2nz_on_vector",
    "inject_barrier_all",
    "inject_block_all",
)


class ConfigMismatch(RuntimeError):
    def __init__(self, message: str, kernel: str):
        super().__init__(message)
        self.kernel = kernel


def sample_configs(configs: list[Any], limit: int) -> list[Any]:
    """All configs up to `limit`; else the first, the largest tiles and evenly spaced others."""
    if len(configs) <= limit:
        return list(configs)
    largest = max(range(len(configs)), key=lambda i: (_tile(configs[i]), -i))
    chosen = [0] if largest == 0 else [0, largest]
    spare = [i for i in range(len(configs)) if i not in chosen]
    want = max(0, limit - len(chosen))
    if want and spare:
        step = len(spare) / want
        chosen += [spare[int(k * step)] for k in range(min(want, len(spare)))]
    return [configs[i] for i in sorted(set(chosen))]


def _tile(config: Any) -> int:
    """The product of a config's integer block sizes (what 'largest tiles' means)."""
    size = 1
    for key, value in getattr(config, "kwargs", {}).items():
        if isinstance(value, int) and not isinstance(value, bool) and key not in COMPILE_OPTIONS:
            size *= max(1, value)
    return size


def describe(config: Any) -> str:
    parts = [f"{k}={v}" for k, v in getattr(config, "kwargs", {}).items()]
    return ", ".join(parts) or "default"


class AutotuneShim:
    """Installs itself over triton's Autotuner; `checked` lists what ran."""

    def __init__(
        self, *, limit: int, compare: Callable[[Any, Any], str | None], on_config: Callable[..., None] | None = None, rotated: int = 1
    ):
        self.limit = limit
        # Launches of one tuning key rotate through the sample, one config each: with
        # `rotated` trials the reference process judges that many configs itself.
        self.rotated = max(1, rotated)
        self.compare = compare  # (kept, other) -> None when they agree, else why not
        self.on_config = on_config
        self.calls: dict[Any, int] = {}
        self.checked: dict[str, dict[str, Any]] = {}
        self.last: dict[str, str] = {}  # kernel -> the config its latest launch kept
        self.mismatch: ConfigMismatch | None = None

    def install(self) -> None:
        from triton.runtime import autotuner

        shim = self

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            return shim.run(self, args, kwargs)

        install_decorators()
        autotuner.Autotuner.run = run

    # -- one launch of an autotuned kernel

    def run(self, tuner: Any, args: tuple, kwargs: dict) -> Any:
        tuner.nargs = dict(zip(tuner.arg_names, args))
        configs = list(tuner.configs)
        if len(configs) > 1:
            try:
                configs = list(tuner.prune_configs(kwargs))
            except Exception:  # noqa: BLE001 - a perf model that needs the device: check them all
                configs = list(tuner.configs)
        sample = sample_configs(configs, self.limit)
        name = getattr(tuner.base_fn, "__name__", "kernel")
        entry = self.checked.setdefault(name, {"configs": len(tuner.configs), "checked": []})
        for config in sample:
            if describe(config) not in entry["checked"]:
                entry["checked"].append(describe(config))
        key = (id(tuner), _tuning_key(tuner, args, kwargs))
        count = self.calls.get(key, 0)
        self.calls[key] = count + 1
        if self.on_config is not None and count == 0:
            for config in tuner.configs:
                self.on_config(tuner, args, kwargs, config)
        kept = sample[count % len(sample)]
        self.last[name] = describe(kept)
        unreached = sample[self.rotated :] if count == 0 else []
        if not unreached:
            return self.launch(tuner, args, kwargs, kept)
        return self.cross_check(tuner, args, kwargs, unreached, kept, name)

    def launch(self, tuner: Any, args: tuple, kwargs: dict, config: Any) -> Any:
        conflicts = kwargs.keys() & config.kwargs.keys()
        if conflicts:
            # What the device's autotuner raises before it benchmarks anything.
            raise ValueError(
                f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}. Make sure that you don't re-define auto-tuned symbols."
            )
        meta = config.all_kwargs()
        full = {**tuner.nargs, **kwargs, **meta}
        for name in getattr(tuner, "reset_to_zero", None) or []:
            # The device autotuner zeroes these after benchmarking, before the real launch.
            if name in full and hasattr(full[name], "zero_"):
                full[name].zero_()
        if config.pre_hook is not None:
            config.pre_hook(full)
        return tuner.fn.run(*args, **kwargs, **meta)

    def cross_check(self, tuner: Any, args: tuple, kwargs: dict, others: list, kept: Any, name: str) -> Any:
        values = list(args) + list(kwargs.values())
        typed, raw = _tensors(values), _storages(values)
        start_raw, start = [r.clone() for r in raw], [t.clone() for t in typed]
        results = []
        for config in others:
            if config is kept:
                continue
            self.launch(tuner, args, kwargs, config)
            results.append((config, [t.clone() for t in typed]))
            for r, s in zip(raw, start_raw):  # each config from the same memory, as the benchmark runs them
                r.copy_(s)
        ret = self.launch(tuner, args, kwargs, kept)
        for config, after in results:
            for theirs, ours, before in zip(after, typed, start):
                if _same(theirs, before) and _same(ours, before):
                    continue  # an input neither config wrote
                why = self.compare(ours, theirs)
                if why:
                    self.mismatch = ConfigMismatch(
                        f"autotuned kernel {name}: config [{describe(config)}] gives different results from "
                        f"config [{describe(kept)}] on the same inputs ({why}); the autotuner may pick either on "
                        "the device, so every config must be right",
                        name,
                    )
                    raise self.mismatch
        return ret


def install_decorators() -> None:
    """Let `@triton.autotune` and `@libentry` be applied with no device (also
    where kernels are only compiled, not run)."""
    from triton.runtime import autotuner

    _decorators(autotuner)


@once_per_module
def _decorators(autotuner: Any) -> None:
    Autotuner = autotuner.Autotuner
    original_init = Autotuner.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # Without a do_bench of its own the autotuner asks the device driver for one.
        if kwargs.get("do_bench") is None:
            kwargs["do_bench"] = _no_benchmark
        original_init(self, *args, **kwargs)

    Autotuner.__init__ = __init__
    install_libentry(autotuner)


def unwrap_kernel(obj: Any) -> Any:
    """The @triton.jit function under autotune/heuristics/libentry wrappers."""
    for _ in range(8):
        if obj is None or hasattr(obj, "src") or not hasattr(obj, "fn"):
            return obj
        obj = obj.fn
    return obj


def _no_benchmark(*_args: Any, **_kwargs: Any) -> float:
    raise RuntimeError("the autotuner's benchmarking does not run on this backend")


def _tuning_key(tuner: Any, args: tuple, kwargs: dict) -> tuple:
    all_args = {**dict(zip(tuner.arg_names, args)), **kwargs}
    key = [all_args.get(k) for k in getattr(tuner, "keys", []) if k in all_args]
    key += [str(v.dtype) for v in all_args.values() if hasattr(v, "dtype")]
    return tuple(repr(k) for k in key)


def _tensors(values: list[Any]) -> list[Any]:
    import torch

    return [v for v in values if isinstance(v, torch.Tensor)]


def _storages(values: list[Any]) -> list[Any]:
    """Each distinct storage behind the tensors, as bytes: a kernel given a view may write around it."""
    import torch

    seen, out = set(), []
    for v in _tensors(values):
        storage = v.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            out.append(torch.empty(0, dtype=torch.uint8).set_(storage))
    return out


def _same(a: Any, b: Any) -> bool:
    import torch

    return (
        bool(torch.equal(a, b)) or bool(torch.equal(a.view(torch.uint8), b.view(torch.uint8)))
        if a.is_contiguous() and b.is_contiguous()
        else bool(torch.equal(a, b))
    )


def install_libentry(autotuner: Any) -> None:
    """triton-ascend's `triton.runtime.libentry` imports torch_npu; here its
    decorators are what they mean for the numbers: the kernel, and an autotuner.
    A libentry that imported (on a machine with torch_npu) is kept."""
    if "triton.runtime.libentry" in sys.modules:
        return
    module = types.ModuleType("triton.runtime.libentry")

    def libentry(*_args: Any, **_kwargs: Any) -> Callable[[Any], Any]:
        return lambda fn: fn

    def libtuner(configs: Any, key: Any, **kwargs: Any) -> Callable[[Any], Any]:
        import triton

        allowed = {"prune_configs_by", "reset_to_zero", "restore_value", "pre_hook", "post_hook"}
        return triton.autotune(configs=configs, key=key, **{k: v for k, v in kwargs.items() if k in allowed})

    vars(module).update(libentry=libentry, libtuner=libtuner, LibEntry=lambda fn, *a, **k: fn)
    sys.modules["triton.runtime.libentry"] = module
    import triton.runtime

    triton.runtime.libentry = module
