"""The machine a plan runs on: a floor below the stages (engine/ builds on it, repository/ and serve/ ask it).

facts.py (what this machine is: L4T, JetPack, CUDA, GPU, memory, power mode, read under a root directory),
tensorrt_api.py (the only module importing tensorrt and pycuda), plan_fit.py (does a recorded plan fit this machine
or this TensorRT?), plan_io.py (are a plan's I/O tensors the manifest's?). Imports no stage.
"""
