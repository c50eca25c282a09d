// cuda_api.h: the driver and NVRTC entry points, resolved at run time into tables of pointers.
//
// Only runtime/*.cpp include this header; it is the one place that names cu*/nvrtc* functions.
// Every entry point used anywhere is listed once below; the tables, the loaders and the error
// messages are generated from those lists, so adding a call means adding one line here.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <nvrtc.h>

#include <type_traits>

#include "base/status.h"
#include "convt3d/convt3d.h"

// X(name, version) for every driver function the runtime calls. `version` is the CUDA version
// that introduced the ABI cuda.h declares for `name` (cudaTypedefs.h's PFN_name_v<version>); the
// symbol is resolved at exactly that version. Asking for CUDA_VERSION instead is wrong: CUDA 13
// gave cuCtxSynchronize a CUcontext parameter, but cuda.h's plain cuCtxSynchronize(void) is
// still the v2000 ABI. A static_assert below checks each pairing against the declarations.
// cuda.h #defines many names to versioned symbols (cuMemAlloc -> cuMemAlloc_v2); the table
// member takes the versioned name too, so `Cu().cuMemAlloc(...)` reads naturally, while #name
// stays the base name that cuGetProcAddress expects.
#define CONVT3D_FOR_EACH_CU(X)        \
  X(cuGetErrorName, 6000)             \
  X(cuGetErrorString, 6000)           \
  X(cuInit, 2000)                     \
  X(cuDriverGetVersion, 2020)         \
  X(cuDeviceGet, 2000)                \
  X(cuDeviceGetCount, 2000)           \
  X(cuDeviceGetName, 2000)            \
  X(cuDeviceGetAttribute, 2000)       \
  X(cuDevicePrimaryCtxRetain, 7000)   \
  X(cuDevicePrimaryCtxRelease, 11000) \
  X(cuCtxSetCurrent, 4000)            \
  X(cuCtxGetCurrent, 4000)            \
  X(cuCtxGetDevice, 2000)             \
  X(cuCtxSynchronize, 2000)           \
  X(cuMemAlloc, 3020)                 \
  X(cuMemFree, 3020)                  \
  X(cuMemcpyHtoD, 3020)               \
  X(cuMemcpyDtoH, 3020)               \
  X(cuMemsetD8, 3020)                 \
  X(cuMemcpyDtoDAsync, 3020)          \
  X(cuModuleLoadData, 2000)           \
  X(cuModuleUnload, 2000)             \
  X(cuModuleGetFunction, 2000)        \
  X(cuFuncGetAttribute, 2020)         \
  X(cuFuncSetAttribute, 9000)         \
  X(cuLaunchKernelEx, 11060)          \
  X(cuEventCreate, 2000)              \
  X(cuEventRecord, 2000)              \
  X(cuEventSynchronize, 2000)         \
  X(cuEventElapsedTime, 12080)        \
  X(cuEventDestroy, 4000)             \
  X(cuStreamSynchronize, 2000)        \
  X(cuStreamIsCapturing, 10000)       \
  X(cuStreamCreateWithPriority, 5050) \
  X(cuStreamDestroy, 4000)            \
  X(cuMemsetD8Async, 3020)           \
  X(cuTensorMapEncodeTiled, 12000)

// X(name) for every NVRTC function the runtime calls (NVRTC exports plain names; no versions).
#define CONVT3D_FOR_EACH_NVRTC(X) \
  X(nvrtcGetErrorString)          \
  X(nvrtcVersion)                 \
  X(nvrtcCreateProgram)           \
  X(nvrtcDestroyProgram)          \
  X(nvrtcCompileProgram)          \
  X(nvrtcGetProgramLogSize)       \
  X(nvrtcGetProgramLog)           \
  X(nvrtcGetCUBINSize)            \
  X(nvrtcGetCUBIN)                \
  X(nvrtcAddNameExpression)       \
  X(nvrtcGetLoweredName)

namespace convt3d::rt {

#define CONVT3D_CU_MEMBER(name, version)                                       \
  static_assert(std::is_same_v<decltype(&::name), PFN_##name##_v##version>,    \
                #name ": cuda.h declares another ABI than version " #version); \
  decltype(&::name) name = nullptr;
struct CudaDriverApi {
  CONVT3D_FOR_EACH_CU(CONVT3D_CU_MEMBER)
};
#undef CONVT3D_CU_MEMBER

#define CONVT3D_NVRTC_MEMBER(name) decltype(&::name) name = nullptr;
struct NvrtcApi {
  CONVT3D_FOR_EACH_NVRTC(CONVT3D_NVRTC_MEMBER)
};
#undef CONVT3D_NVRTC_MEMBER

// Loads libcuda.so.1 once (thread-safe), resolves the table and calls cuInit(0). Later calls
// return the first outcome. kFailedPrecondition, with a one-line reason, when there is no
// usable driver.
Status LoadDriver();
// The table; REQUIRES: LoadDriver() returned ok.
const CudaDriverApi& Cu();

// Loads libnvrtc.so.13 once (thread-safe); kFailedPrecondition with the dlerror() text if not.
Status LoadNvrtc();
// The table; REQUIRES: LoadNvrtc() returned ok.
const NvrtcApi& Nvrtc();

// kInternal "<call> failed: CUDA_ERROR_X (description)", or OK for CUDA_SUCCESS.
Status CuStatus(CUresult result, const char* call_text);
// kInternal "<call> failed: NVRTC_ERROR_X", or OK for NVRTC_SUCCESS.
Status NvrtcStatus(nvrtcResult result, const char* call_text);

}  // namespace convt3d::rt

// Checked calls through the tables. The call text is stringized here, in the outermost macro,
// because an inner macro would see it after cuda.h's renames (cuMemAlloc_v2).
//   CONVT3D_CU_RETURN_IF_ERROR(cuModuleLoadData(&module, image));
//   Status s = CONVT3D_CU_STATUS(cuMemFree(ptr));
#define CONVT3D_CU_STATUS(call) ::convt3d::rt::CuStatus(::convt3d::rt::Cu().call, #call)
#define CONVT3D_CU_RETURN_IF_ERROR(call) \
  CONVT3D_RETURN_IF_ERROR(::convt3d::rt::CuStatus(::convt3d::rt::Cu().call, #call))

#define CONVT3D_NVRTC_STATUS(call) ::convt3d::rt::NvrtcStatus(::convt3d::rt::Nvrtc().call, #call)
#define CONVT3D_NVRTC_RETURN_IF_ERROR(call) \
  CONVT3D_RETURN_IF_ERROR(::convt3d::rt::NvrtcStatus(::convt3d::rt::Nvrtc().call, #call))
