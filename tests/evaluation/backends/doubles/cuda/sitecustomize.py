"""TEST DOUBLE: on PYTHONPATH, makes every interpreter that starts see a CUDA
device that is really the CPU (see device_double). Only for the cuda backend
tests on machines without a GPU."""

import device_double

device_double.install("cuda", "NVIDIA H200")
