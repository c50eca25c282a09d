// cuda_api.cpp: dlopen's libcuda.so.1 and libnvrtc.so.13 once and fills the entry-point tables.
#include "runtime/cuda_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "base/dl.h"
#include "base/status.h"

#ifndef CONVT3D_CUDA_LIB_DIR
#define CONVT3D_CUDA_LIB_DIR "/usr/local/cuda/lib64"
#endif

namespace convt3d::rt {
namespace {

// Library handles are never dlclose'd: Context, Kernel and DeviceBuffer objects may live in
// statics whose destructors run after any destructor of ours would (and still call into the
// tables), and unloading libcuda while its own threads and atexit handlers are alive is a known
// source of crashes at exit. The process exit reclaims the mappings anyway.
// One library's entry-point table (CudaDriverApi or NvrtcApi), filled once.
template <typename Api>
struct Library {
  std::once_flag once;
  Status status;
  Api api;
};

// Heap-allocated and never destroyed, for the same reason as the handles above.
template <typename Api>
Library<Api>& State() {
  static Library<Api>* state = new Library<Api>;
  return *state;
}

// Runs `load` on the first call only. The table is published only when complete, so a failed
// load leaves no half-filled pointers.
template <typename Api>
Status LoadOnce(Status (*load)(Api&)) {
  Library<Api>& s = State<Api>();
  std::call_once(s.once, [&s, load] {
    Api api;
    s.status = load(api);
    if (s.status.ok()) s.api = api;
  });
  return s.status;
}

std::string CuResultText(const CudaDriverApi& api, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(r, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(r, &text);
  std::string out = name ? name : StrCat("CUresult ", static_cast<int>(r));
  if (text) out += StrCat(" (", text, ")");
  return out;
}

using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                               CUdriverProcAddressQueryResult*);
using GetProcV1 = CUresult (*)(const char*, void**, int, cuuint64_t);

Status LoadDriverOnce(CudaDriverApi& api) {
  constexpr const char* kHint = "(this machine has no NVIDIA driver; compile-only work still runs)";
  // Only the versioned soname: an unversioned libcuda.so may be the toolkit's link stub, which
  // loads fine and then fails every call.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return FailedPrecondition(StrCat("no CUDA driver: ", DlError(), " ", kHint));

  // Every other entry point goes through cuGetProcAddress, at the version of the ABI that cuda.h
  // declares (see cuda_api.h): dlsym("cuMemAlloc") would return the legacy 32-bit-pointer ABI,
  // not the cuMemAlloc_v2 that the declarations describe.
  auto get_v2 = reinterpret_cast<GetProcV2>(dlsym(lib, "cuGetProcAddress_v2"));
  GetProcV1 get_v1 = nullptr;
  if (get_v2 == nullptr) {
    get_v1 = reinterpret_cast<GetProcV1>(dlsym(lib, "cuGetProcAddress"));
    if (get_v1 == nullptr) {
      return FailedPrecondition(
          StrCat("CUDA driver too old: libcuda.so.1 has no cuGetProcAddress: ", DlError()));
    }
  }
  auto resolve = [&](const char* name, int version, void** fn) -> Status {
    *fn = nullptr;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = get_v2 ? get_v2(name, fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found)
                        : get_v1(name, fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
    if (r != CUDA_SUCCESS) {
      return FailedPrecondition(StrCat("CUDA driver: cuGetProcAddress(\"", name, "\", ", version,
                                       ") failed: ", CuResultText(api, r)));
    }
    if (found != CU_GET_PROC_ADDRESS_SUCCESS || *fn == nullptr) {
      const char* why = found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            ? "version not sufficient"
                            : "symbol not found";
      return FailedPrecondition(StrCat("CUDA driver lacks ", name, " for CUDA ", version, ": ", why,
                                       " (driver too old?)"));
    }
    return Status();
  };
#define CONVT3D_RESOLVE_CU(name, version)                  \
  {                                                        \
    void* fn = nullptr;                                    \
    CONVT3D_RETURN_IF_ERROR(resolve(#name, version, &fn)); \
    api.name = reinterpret_cast<decltype(api.name)>(fn);   \
  }
  CONVT3D_FOR_EACH_CU(CONVT3D_RESOLVE_CU)
#undef CONVT3D_RESOLVE_CU

  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    return FailedPrecondition(
        StrCat("CUDA driver loaded but cuInit(0) failed: ", CuResultText(api, r)));
  }
  return Status();
}

Status LoadNvrtcOnce(NvrtcApi& api) {
  void* lib = dlopen("libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::string first = DlError();
    // The toolkit's lib dir is often not on the loader path (no ldconfig entry, no
    // LD_LIBRARY_PATH), but it is known at build time.
    lib = dlopen(CONVT3D_CUDA_LIB_DIR "/libnvrtc.so.13", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      return FailedPrecondition(StrCat("no NVRTC: ", first, "; ", DlError()));
    }
  }
#define CONVT3D_RESOLVE_NVRTC(name)                                                             \
  {                                                                                             \
    void* fn = dlsym(lib, #name);                                                               \
    if (fn == nullptr) return FailedPrecondition(StrCat("NVRTC lacks " #name ": ", DlError())); \
    api.name = reinterpret_cast<decltype(api.name)>(fn);                                        \
  }
  CONVT3D_FOR_EACH_NVRTC(CONVT3D_RESOLVE_NVRTC)
#undef CONVT3D_RESOLVE_NVRTC
  return Status();
}

}  // namespace

Status LoadDriver() { return LoadOnce(LoadDriverOnce); }

const CudaDriverApi& Cu() { return State<CudaDriverApi>().api; }

Status LoadNvrtc() { return LoadOnce(LoadNvrtcOnce); }

const NvrtcApi& Nvrtc() { return State<NvrtcApi>().api; }

Status CuStatus(CUresult result, const char* call_text) {
  if (result == CUDA_SUCCESS) return Status();
  return Internal(StrCat(call_text, " failed: ", CuResultText(Cu(), result)));
}

Status NvrtcStatus(nvrtcResult result, const char* call_text) {
  if (result == NVRTC_SUCCESS) return Status();
  const char* text = Nvrtc().nvrtcGetErrorString ? Nvrtc().nvrtcGetErrorString(result) : nullptr;
  return Internal(StrCat(
      call_text,
      " failed: ", text ? std::string(text) : StrCat("nvrtcResult ", static_cast<int>(result))));
}

}  // namespace convt3d::rt
