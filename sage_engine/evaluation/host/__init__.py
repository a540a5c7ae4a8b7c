"""What runs in the process that asks for evaluations (the server, the CLI,
a Ray worker on an evaluation host): the pool of worker processes, their
sandbox (bubblewrap) and launch settings, the host's timing turn, the
shared build cache, facts about this machine, and the host-side data of an
evaluation (tasks, static checks, shape variants, results).

- `pool.py`: `WorkerPool`, at most `Config.eval_workers` evaluations at once;
- `workers.py`: one worker process, one evaluation run on it, and the
  host's timing turn (one timing phase at a time per host);
- `launch.py`: how a worker starts, what its sandbox hides, and the folders
  dead processes left;
- `confine.py`: the bubblewrap command line and the probe;
- `builds.py`: the build cache;
- `machine.py`: the hardware string, versions, the memory cap's size;
- `calibration.py`: this host's measured limits per backend, cached or
  measured; `roofline.py`: a profile judged against them (pure);
- `tasks.py`: tasks (parsed, never run here); `variants.py`: their shape
  variants; `static_checks.py`: the candidate's source checked before it runs;
  `results.py`: what the worker reported, judged into an `EvalResult`.
"""
