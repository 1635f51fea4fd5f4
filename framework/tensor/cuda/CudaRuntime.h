#pragma once

#include <cstdint>
#include <string>

namespace aps::cuda {

// True when this build contains the CUDA backend (APS_WITH_CUDA found the toolkit).
bool compiledWithCuda();

// Number of usable CUDA devices; 0 when the build has no CUDA or the machine no GPU.
int deviceCount();

// A one-line description of device `index` ("NVIDIA H200, sm_90, 139 GiB").
std::string deviceDescription(int index);

// Fills n floats of host memory with `value` by running a kernel on device `index`
// (device buffer, kernel, copy back): the smallest end-to-end proof the backend works.
void fillOnDevice(float* host, int64_t n, float value, int index = 0);

}  // namespace aps::cuda
