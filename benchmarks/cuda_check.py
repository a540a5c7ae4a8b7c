"""Evaluate a few suite tasks on the `cuda` backend and print the results.

Meant for a GPU host, as one command from the repository root:

    python benchmarks/cuda_check.py [task ...]

It needs a CUDA build of torch, triton, pydantic and platformdirs in the
interpreter that runs it (SAGE itself need not be installed: the repository
root goes on sys.path). Exit status 0 when every evaluation was correct.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (task, candidate file in its solutions/): a Triton kernel, a fused Triton
# kernel with a reduction, and a PyTorch candidate.
DEFAULT = [("softmax", "triton_softmax.py"), ("layer_norm", "triton_layer_norm.py"), ("gelu", "cpu_erf.py")]


def main(argv: list[str]) -> int:
    import torch

    from sage_engine.config import Config
    from sage_engine.evaluation.backends.cuda import CudaBackend
    from sage_engine.evaluation.tasks import load_task

    print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}", file=sys.stderr)
    suite = ROOT / "sage_engine" / "suite" / "tasks"
    pairs = DEFAULT
    if argv:
        pairs = []
        for tid in argv:
            folder = suite / tid / "solutions"
            solutions = sorted(folder.glob("triton_*.py")) or sorted(folder.glob("cpu_*.py"))
            if not solutions:
                print(f"{tid}: no triton_* or cpu_* candidate in {folder}", file=sys.stderr)
                return 2
            pairs.append((tid, solutions[0].name))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(db_path=Path(tmp) / "m.db", cache_dir=Path(tmp) / "cache", warm_pool=False)
        backend = CudaBackend(config)
        status = backend.status()
        print(json.dumps(status.model_dump()), flush=True)
        if not status.ready:
            return 2
        try:
            for tid, solution in pairs:
                task = load_task(suite / tid)
                start = time.monotonic()
                result = backend.evaluate(task, (suite / tid / "solutions" / solution).read_text(), trials=3)
                ok = ok and result.status == "correct"
                print(json.dumps({
                    "task": tid, "candidate": solution, "status": result.status, "hardware": result.hardware,
                    "speedup": result.speedup,
                    "reference_ms": result.reference_timing.median_ms if result.reference_timing else None,
                    "candidate_ms": result.candidate_timing.median_ms if result.candidate_timing else None,
                    "iqr_ms": result.candidate_timing.iqr_ms if result.candidate_timing else None,
                    "reps": result.candidate_timing.reps if result.candidate_timing else None,
                    "message": result.message[:300], "wall_s": round(time.monotonic() - start, 1),
                }), flush=True)
        finally:
            backend.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
