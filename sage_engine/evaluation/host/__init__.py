"""What runs in the process that asks for evaluations (the server, the CLI,
a Ray worker on an evaluation host): the pool of worker processes, their
sandbox (bubblewrap) and launch settings, the host's timing turn, the
shared build cache, and facts about this machine.

- `pool.py`: `WorkerPool`, at most `Config.eval_workers` evaluations at once;
- `workers.py`: one worker process, and one evaluation run on it;
- `launch.py`: how a worker starts and what its sandbox hides;
- `confine.py`: the bubblewrap command line and the probe;
- `timing_turn.py`: one timing phase at a time per host;
- `builds.py`: the build cache; `leftovers.py`: folders dead processes left;
- `machine.py`: the hardware string, versions, the memory cap's size;
- `calibration.py`: this host's measured limits per backend, cached;
  `roofline.py`: a profile judged against them (pure).
"""
