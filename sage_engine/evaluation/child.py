"""The evaluation that runs inside the sandbox child process.

Reached two ways: forked from a warm worker (`worker.py`), or as a fresh
interpreter (`python -m sage_engine.evaluation.child`, request on stdin).
Either way `child_main` applies the limits, runs the request's runner and
reports over the result pipe as JSON lines carrying the request's token;
the exit code is never the result.

Only the standard library, torch and the sibling pure modules are imported
here, so a backend may run this under another interpreter (its own venv).
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import json
import os
import platform
import resource
import secrets
import signal
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

from sage_engine.evaluation import anticheat, correctness, diagnostics, timing
from sage_engine.evaluation.sandbox import scrub_environ

DEFAULT_RUNNER = "sage_engine.evaluation.child:run_evaluation"
RLIMIT_FSIZE_BYTES = 4 << 30  # no candidate needs to write a 4 GiB file; a runaway one would fill the disk


class Emitter:
    """Writes events to the result pipe. Only the process that started the
    evaluation may write: a candidate that forks must not report twice."""

    def __init__(self, fd: int, token: str):
        self.fd, self.token, self.pid = fd, token, os.getpid()

    def send(self, event: dict[str, Any]) -> None:
        if os.getpid() != self.pid:
            os._exit(0)
        data = (json.dumps({**event, "token": self.token}, default=str) + "\n").encode()
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def progress(self, done: float, total: float | None, message: str) -> None:
        self.send({"ev": "progress", "progress": done, "total": total, "message": message})


def child_main(request: dict[str, Any], result_fd: int) -> None:
    """Entry point in the child; never returns."""
    emit = Emitter(result_fd, request["token"])
    code = 0
    try:
        prepare(request)
        runner = _resolve(request.get("runner") or DEFAULT_RUNNER)
        result = runner(request, emit)
    except BaseException as exc:  # the runner reports candidate failures itself; this is a harness fault
        result = {
            "status": "runtime_error",
            "message": f"evaluation failed inside the sandbox: {diagnostics.exception_text(exc)}",
            "diagnostics": [diagnostics.diagnostic("harness", diagnostics.exception_text(exc))],
        }
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    emit.send({"ev": "result", "result": result})
    os._exit(code)


def prepare(request: dict[str, Any]) -> None:
    # A crash prints the Python stack (with candidate.py lines) to stderr; the
    # supervisor sends SIGUSR1 before killing a child that ran out of time.
    faulthandler.enable(file=sys.stderr, all_threads=False)
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=False)
    limits = request.get("limits", {})
    if limits.get("cgroup"):
        try:
            Path(limits["cgroup"], "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            pass  # the supervisor's process watch still applies
    mb = limits.get("memory_mb")
    if mb:
        resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))
    cpu_s = limits.get("cpu_s")
    if cpu_s:
        # Soft limit sends SIGXCPU (reported as a timeout), hard limit kills.
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_s), int(cpu_s) + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (RLIMIT_FSIZE_BYTES, RLIMIT_FSIZE_BYTES))
    workdir = request["workdir"]
    os.chdir(workdir)
    scrub_environ(os.environ)
    os.environ.update(request.get("env", {}))
    os.environ["HOME"] = workdir
    sys.path[:] = [p for p in sys.path if p not in ("", ".", workdir)]
    import torch

    threads = int(request.get("threads", 1))
    torch.set_num_threads(threads)
    for module in request.get("preload", []):
        importlib.import_module(module)


def _resolve(spec: str) -> Callable[[dict[str, Any], Emitter], dict[str, Any]]:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for dist in ("torch", "triton", "torch_npu", "triton-ascend"):
        try:
            out[dist.replace("-", "_")] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return out


# --------------------------------------------------------------------- runner


class _Failure(Exception):
    """Ends the evaluation with a status (raised by the runner's helpers)."""

    def __init__(self, status: str, message: str, diags: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status, self.message, self.diags = status, message, diags or []


class _Run:
    def __init__(self, request: dict[str, Any], emit: Emitter):
        import torch

        self.torch = torch
        self.req = request
        self.emit = emit
        self.task = request["task"]
        self.device = torch.device(request.get("device", "cpu"))
        self.mode = request.get("tolerance_mode", "kernelbench")
        self.override = self.task.get("tolerance") or {}
        self.trials = max(1, int(request.get("trials", 3)))
        self.timing_opts = request.get("timing")
        self.cases_out: list[dict[str, Any]] = []
        self.phases: dict[str, float] = {"model_calls": 0.0}
        self.cand_path = str(Path(request["workdir"], diagnostics.CANDIDATE_FILE))
        n_cases = len(self.task["cases"])
        self.total = 2 + n_cases + (1 if self.timing_opts else 0)

    # -- helpers

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        try:
            with self.torch.no_grad():
                out = fn(*args)
            self.sync()
            return out
        finally:
            self.phases["model_calls"] += time.perf_counter() - start

    def sync(self) -> None:
        if self.device.type != "cpu":
            getattr(self.torch, self.device.type).synchronize()

    def to_device(self, values: list[Any]) -> list[Any]:
        return [v.to(self.device) if isinstance(v, self.torch.Tensor) else v for v in values]

    def clone(self, values: list[Any]) -> list[Any]:
        return [v.clone() if isinstance(v, self.torch.Tensor) else v for v in values]

    def candidate_failure(self, exc: BaseException, what: str) -> _Failure:
        category = "runtime"
        if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "out of memory" in str(exc):
            category = "memory"
        diag = diagnostics.from_exception(exc, category, self.cand_path)
        return _Failure("runtime_error", f"{what} raised {diagnostics.exception_text(exc)}", [diag])

    # -- stages

    def load_candidate(self) -> type:
        source = self.req["candidate_source"]
        Path(self.cand_path).write_text(source, encoding="utf-8")
        start = time.perf_counter()
        spec = importlib.util.spec_from_file_location("candidate", self.cand_path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["candidate"] = module
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise _Failure("compile_error", f"SyntaxError: {exc.msg}", [diagnostics.from_syntax_error(exc)])
        except BaseException as exc:
            text = str(exc)
            if "Error building extension" in text or "error:" in text and "ninja" in text:
                frames = diagnostics.candidate_frames(exc, self.cand_path)
                fallback = frames[-1].lineno if frames else None
                diags = diagnostics.compiler_errors(text, source, fallback_line=fallback)
                if not diags:
                    diags = [diagnostics.diagnostic("cpp", diagnostics.exception_text(exc), line=fallback)]
                raise _Failure("compile_error", "C++ extension build failed: " + diags[0]["message"], diags)
            category = "import" if isinstance(exc, ImportError) else "module"
            diag = diagnostics.from_exception(exc, category, self.cand_path)
            raise _Failure("compile_error", f"loading the candidate raised {diagnostics.exception_text(exc)}", [diag])
        finally:
            self.phases["import"] = time.perf_counter() - start
        cls = getattr(module, "ModelNew", None)
        if not isinstance(cls, type):
            raise _Failure(
                "compile_error", "the candidate defines no class ModelNew",
                [diagnostics.diagnostic("interface", "define `class ModelNew(nn.Module)` with the reference's "
                                        "constructor and forward signature")],
            )
        return cls

    def load_reference(self, case: dict[str, Any]) -> types.ModuleType:
        name = f"_sage_ref_{secrets.token_hex(6)}"
        module = types.ModuleType(name)
        filename = self.task.get("reference_path") or "<reference>"
        code = compile(self.task["reference_source"], filename, "exec")
        sys.modules[name] = module  # dataclasses and pickling look modules up by name
        try:
            exec(code, module.__dict__)
        except BaseException as exc:
            raise _Failure("runtime_error", f"the reference failed to load: {diagnostics.exception_text(exc)}",
                           [diagnostics.diagnostic("reference", diagnostics.exception_text(exc))])
        for key, value in case.items():
            module.__dict__[key] = self.case_value(value)
        return module

    def case_value(self, value: Any) -> Any:
        if isinstance(value, str) and value in DTYPES and hasattr(self.torch, value):
            return getattr(self.torch, value)
        return value

    def reference_call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return self.call(fn, *args)
        except BaseException as exc:
            raise _Failure("runtime_error", f"the reference's {what} failed: {diagnostics.exception_text(exc)}",
                           [diagnostics.diagnostic("reference", diagnostics.exception_text(exc))])

    def run_case(self, index: int, case: dict[str, Any], model_new: type) -> tuple[bool, Any]:
        torch = self.torch
        ref_mod = self.load_reference(case)
        seed = int(self.task.get("seed", 1024))
        init = self.reference_call("get_init_inputs()", ref_mod.get_init_inputs)
        torch.manual_seed(seed)
        ref_model = self.reference_call("constructor", ref_mod.Model, *init)
        torch.manual_seed(seed)
        try:
            cand_model = self.call(model_new, *init)
        except BaseException as exc:
            raise self.candidate_failure(exc, "ModelNew(*get_init_inputs())")
        ref_model = ref_model.to(self.device) if isinstance(ref_model, torch.nn.Module) else ref_model
        try:
            if isinstance(cand_model, torch.nn.Module):
                cand_model = cand_model.to(self.device)
        except BaseException as exc:
            raise self.candidate_failure(exc, f"ModelNew.to({self.device})")
        cand_in: list[Any] | None = None
        prev: tuple[list[Any], list[Any]] | None = None
        ok = True
        for trial in range(self.trials):
            torch.manual_seed(seed + trial)
            ref_in = self.to_device(self.reference_call("get_inputs()", ref_mod.get_inputs))
            pristine = self.clone(ref_in)
            fresh = pristine
            # Later trials copy new values into the same tensors: a candidate
            # that memoises on tensor identity then returns stale outputs.
            if cand_in is None or not _same_layout(cand_in, fresh):
                cand_in = self.clone(fresh)
            else:
                for dst, src in zip(cand_in, fresh):
                    if isinstance(dst, torch.Tensor):
                        dst.copy_(src)
                cand_in = [d if isinstance(d, torch.Tensor) else s for d, s in zip(cand_in, fresh)]
            ref_out = correctness.as_output_list(self.reference_call("forward", ref_model, *ref_in))
            try:
                raw = self.call(cand_model, *cand_in)
            except BaseException as exc:
                raise self.candidate_failure(exc, "ModelNew.forward")
            cand_out = correctness.as_output_list(raw)
            ref_mut = anticheat.mutated(pristine, ref_in)
            self.dynamic_checks(ref_in, ref_out, ref_mut, cand_in, cand_out, pristine)
            result = correctness.compare_outputs(
                ref_out + [ref_in[j] for j in ref_mut], cand_out + [cand_in[j] for j in ref_mut],
                mode=self.mode, override=self.override,
            )
            if not result.ok and prev is not None:
                self.check_cached(prev, ref_out, cand_out)
            row = {"case": case, "trial": trial, **result.as_dict()}
            self.cases_out.append(row)
            self.emit.send({"ev": "case", "case_result": row})
            if not result.ok:
                ok = False
                break
            # References, not copies: the next call returns new tensors, or
            # rewrites these ones, which the cached-output check also catches.
            prev = (ref_out, cand_out)
        size = sum(v.numel() * v.element_size() for v in pristine if isinstance(v, torch.Tensor))
        return ok, (size, case, ref_model, cand_model, ref_in, cand_in)

    def dynamic_checks(self, ref_in, ref_out, ref_mut, cand_in, cand_out, pristine) -> None:
        ref_alias = set(anticheat.aliased(ref_out, ref_in))
        for i, j in anticheat.aliased(cand_out, cand_in):
            if (i, j) not in ref_alias:
                raise _Failure("rejected", f"output {i} shares memory with input {j}; return a new tensor",
                               [diagnostics.diagnostic("cheat", f"output {i} aliases input {j} (the reference "
                                                       "returns fresh memory)")])
        unexpected = sorted(set(anticheat.mutated(pristine, cand_in)) - set(ref_mut))
        if unexpected:
            raise _Failure("rejected", f"the candidate modifies input {unexpected[0]} in place; the reference does not",
                           [diagnostics.diagnostic("cheat", f"input {j} was mutated by ModelNew.forward")
                            for j in unexpected])

    def check_cached(self, prev, ref_out, cand_out) -> None:
        prev_ref, prev_cand = prev
        if correctness.same_values(prev_cand, cand_out) and not correctness.same_values(prev_ref, ref_out):
            same_obj = any(a is b for a, b in zip(prev_cand, cand_out))
            detail = " (the same tensor object as the previous call)" if same_obj else ""
            raise _Failure("rejected", "the candidate returned the previous call's output for different inputs"
                           f"{detail}: outputs are cached, not computed",
                           [diagnostics.diagnostic("cheat", "returns cached outputs for new inputs" + detail)])

    def run_timing(self, chosen) -> dict[str, Any]:
        _, case, ref_model, cand_model, ref_in, cand_in = chosen
        opts = self.timing_opts
        timer = timing.get_timer(opts.get("timer", "perf_counter"))
        torch = self.torch

        def ref_fn():
            with torch.no_grad():
                ref_model(*ref_in)
            self.sync()

        def cand_fn():
            with torch.no_grad():
                cand_model(*cand_in)
            self.sync()

        start = time.perf_counter()
        try:
            ref_s, cand_s = timing.measure_alternating(
                ref_fn, cand_fn, timer=timer, warmup=int(opts.get("warmup", 3)),
                min_reps=int(opts.get("min_reps", 10)), max_reps=int(opts.get("max_reps", 200)),
                budget_s=float(opts.get("budget_s", 2.0)),
            )
        except BaseException as exc:
            raise self.candidate_failure(exc, "timing ModelNew.forward")
        finally:
            elapsed = time.perf_counter() - start
            self.phases["timing"] = elapsed
            self.phases["model_calls"] += elapsed
        return {"reference": timing.stats(ref_s), "candidate": timing.stats(cand_s), "case": case,
                "timer": opts.get("timer", "perf_counter")}

    def run(self) -> dict[str, Any]:
        started = time.perf_counter()
        self.emit.progress(1, self.total, "loading candidate")
        model_new = self.load_candidate()
        correct = True
        chosen = None
        corr_start = time.perf_counter()
        for index, case in enumerate(self.task["cases"]):
            self.emit.progress(2 + index, self.total, f"checking case {index + 1}/{len(self.task['cases'])}")
            ok, info = self.run_case(index, case, model_new)
            correct = correct and ok
            if ok and (chosen is None or info[0] > chosen[0]):
                chosen = info
        self.phases["correctness"] = time.perf_counter() - corr_start
        failing = [c for c in self.cases_out if not c["ok"]]
        result: dict[str, Any] = {"cases": self.cases_out}
        if failing:
            first = failing[0]
            result.update(status="incorrect", message=f"case {first['case'] or 'default'} trial {first['trial']}: "
                          f"{first['message']}", mismatch=first["message"],
                          diagnostics=[diagnostics.diagnostic("mismatch", first["message"])])
        else:
            result.update(status="correct", message=f"correct on {len(self.cases_out)} trial(s) over "
                          f"{len(self.task['cases'])} case(s)")
            if self.timing_opts and chosen is not None:
                self.emit.progress(self.total - 1, self.total, "timing")
                result["timing"] = self.run_timing(chosen)
        self.phases["child_total"] = time.perf_counter() - started
        return result


DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64")


def _same_layout(a: list[Any], b: list[Any]) -> bool:
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and (x.shape != y.shape or x.dtype != y.dtype or x.device != y.device):
            return False
    return True


def run_evaluation(request: dict[str, Any], emit: Emitter) -> dict[str, Any]:
    """The default runner: compile, check every case and trial, then time."""
    run = _Run(request, emit)
    try:
        result = run.run()
    except _Failure as failure:
        result = {"status": failure.status, "message": failure.message, "diagnostics": failure.diags,
                  "cases": run.cases_out}
        if failure.status == "incorrect":
            result["mismatch"] = failure.message
    result["phases"] = run.phases
    result["versions"] = versions()
    return result


def _main() -> None:
    """Cold path: `python -m sage_engine.evaluation.child RESULT_FD`, request on stdin."""
    result_fd = int(sys.argv[1])
    request = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    child_main(request, result_fd)


if __name__ == "__main__":
    _main()
