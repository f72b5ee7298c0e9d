// tests/python/cuda_glue_link.cpp — links the Python package's CUDA glue
// (python/gnmr/csrc/device.cu) into a program, so that CI on a machine
// without a GPU still fails on a glue that does not compile or has an
// unresolved symbol. Built, not run (the package's GPU behaviour is tested
// by tests/python/test_cuda.py on a GPU).
#include "device.hpp"

int main() { return gnmr_py::cuda_built() ? 0 : 1; }
