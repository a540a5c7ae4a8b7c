"""What runs in the two children of one evaluation, forked by the worker:

- the reference process (`reference.py`) runs the task's `Model`, makes
  each trial's inputs and sends them to the candidate process, receives the
  candidate's outputs as bytes and compares them. It never loads the
  candidate, so nothing the candidate patches, caches or starts can change
  what the reference computes, how fast it runs, or what the comparison says;
- the candidate process (`candidate.py`) loads the candidate, runs
  `ModelNew` on those inputs and sends its outputs, materialised as plain
  tensors, to the reference process;
- or, for a backend with a routine of its own (`main.py`: the Ascend
  compile step in `ascend.py`, the device probe in `device.py`, the
  machine's limits in `calibration.py`, Nsight Compute in `ncu.py`), that routine.

The interpreter backends' patches that make the CPU interpreters behave
like the hardware (bf16, bounds, autotune configs, ...) live apart, in
`fidelity/`: what is left here is the evaluation's own logic.

Both sides then answer the worker's timing commands, each timing its batch
with the timer it made before any candidate code ran; the worker bounds
every claim with its own clock. After timing, each profiles its own calls
(`profiling.py`: kernels per call; the reference adds the call's work). Each child applies the limits itself
(`side.prepare`), leads its own session and reports events as JSON lines
that carry the evaluation's token; the exit code is never the result.

Standard library and torch only: a backend may run the children under
another interpreter (its own virtualenv).
"""
