"""What runs in the evaluation worker: a process, inside its own sandbox
when the host can confine, that has imported torch once and runs
evaluations on request (`python -m sage_engine.evaluation.worker`).

- `__main__.py`: the worker's loop, one `Request` at a time;
- `evaluation.py`: one evaluation, phase by phase (correctness, timing, report);
- `children.py`: forking the reference and candidate processes;
- `supervisor.py`: their events, limits, deadline and the host's operations;
- `timed.py`: the timing phase; `guards.py`: what it watches meanwhile;
- `profiling.py`: the profile phase after timing (each side's kernels, the call's work);
- `scratch.py`: the scratch folder between evaluations.

Standard library only: torch lives in the children.
"""
