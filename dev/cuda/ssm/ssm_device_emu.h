// Retired from tools/cuda_emu/ssm_device.h with v5 (dev/cuda/ssm/scan_v5.cu; docs/worklog/ssm-scan.md "v5"): the
// device attribute the scan v5 asks for (its SM count), for the SSM emulation only (run_ssm.sh included it
// ahead of scan_v5.cpp; the engine emulation has its own attributes in engine_emu.cuh). A small device: 4
// multiprocessors, so that the plan splits the small test shapes into several chunks.
#pragma once
#include <cuda_runtime.h>  // the copy on the emulation's include path (one definition)

enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) { *v = 4; return cudaSuccess; }
