// driver.cpp: devices, the primary context, device memory and loaded kernels via the driver API.
#include <climits>
#include <string>
#include <utility>

#include "base/status.h"
#include "runtime/cuda_api.h"
#include "runtime/runtime.h"

namespace convt3d::rt {
namespace {

CUmodule AsModule(void* p) { return static_cast<CUmodule>(p); }
CUfunction AsFunction(void* p) { return static_cast<CUfunction>(p); }

Status WithContext(const std::string& what, const Status& s) {
  if (s.ok()) return s;
  return Status(s.code(), StrCat(what, ": ", s.message()));
}

}  // namespace

StatusOr<int> DeviceCount() {
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  int count = 0;
  CONVT3D_CU_RETURN_IF_ERROR(cuDeviceGetCount(&count));
  return count;
}

StatusOr<DeviceInfo> QueryDevice(int ordinal) {
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  int count = 0;
  CONVT3D_CU_RETURN_IF_ERROR(cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count) {
    return FailedPrecondition(
        StrCat("no CUDA device ", ordinal, ": this machine has ", count, " device(s)"));
  }
  CUdevice dev = 0;
  CONVT3D_CU_RETURN_IF_ERROR(cuDeviceGet(&dev, ordinal));

  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  CONVT3D_CU_RETURN_IF_ERROR(cuDeviceGetName(name, sizeof(name) - 1, dev));
  info.name = name;
  CONVT3D_CU_RETURN_IF_ERROR(cuDriverGetVersion(&info.driver_version));
  const std::pair<CUdevice_attribute, int*> attributes[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info.cc_major},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info.cc_minor},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info.sm_count},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &info.max_threads_per_block},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, &info.max_regs_per_block},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &info.max_smem_per_block_optin},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &info.l2_bytes},
  };
  for (const auto& [attribute, out] : attributes) {
    CONVT3D_CU_RETURN_IF_ERROR(cuDeviceGetAttribute(out, attribute, dev));
  }
  return info;
}

// ---- Context ---------------------------------------------------------------------------------

StatusOr<std::shared_ptr<Context>> Context::Create(int ordinal) {
  CONVT3D_ASSIGN_OR_RETURN(DeviceInfo info, QueryDevice(ordinal));
  CUdevice dev = 0;
  CONVT3D_CU_RETURN_IF_ERROR(cuDeviceGet(&dev, ordinal));
  CUcontext ctx = nullptr;
  // The primary context is the one the runtime API (and so PyTorch) uses: pointers and streams
  // from either side are then valid in the other.
  CONVT3D_CU_RETURN_IF_ERROR(cuDevicePrimaryCtxRetain(&ctx, dev));
  std::shared_ptr<Context> context(new Context);
  context->info_ = std::move(info);
  context->device_ = dev;
  context->ctx_ = ctx;
  CONVT3D_RETURN_IF_ERROR(context->Activate());
  return context;
}

Context::~Context() {
  // An error here (e.g. CUDA_ERROR_DEINITIALIZED during process exit) leaves nothing to undo.
  if (ctx_ != nullptr) (void)Cu().cuDevicePrimaryCtxRelease(device_);
}

Status Context::Activate() const {
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  return CONVT3D_CU_STATUS(cuCtxSetCurrent(static_cast<CUcontext>(ctx_)));
}

// ---- DeviceBuffer ----------------------------------------------------------------------------

StatusOr<DeviceBuffer> DeviceBuffer::Alloc(size_t bytes) {
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;  // cuMemAlloc rejects 0; an empty buffer is still useful
  CUdeviceptr ptr = 0;
  CONVT3D_RETURN_IF_ERROR(WithContext(StrCat("allocating ", bytes, " bytes"),
                                      CONVT3D_CU_STATUS(cuMemAlloc(&ptr, bytes))));
  buffer.ptr_ = ptr;
  buffer.bytes_ = bytes;
  return buffer;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != 0) (void)Cu().cuMemFree(static_cast<CUdeviceptr>(ptr_));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != 0) (void)Cu().cuMemFree(static_cast<CUdeviceptr>(ptr_));
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Status DeviceBuffer::Upload(const void* host, size_t bytes) {
  if (bytes > bytes_) {
    return InvalidArgument(StrCat("upload of ", bytes, " bytes into a buffer of ", bytes_));
  }
  if (bytes == 0) return Status();
  if (host == nullptr) return InvalidArgument("upload from a null host pointer");
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  return CONVT3D_CU_STATUS(cuMemcpyHtoD(static_cast<CUdeviceptr>(ptr_), host, bytes));
}

Status DeviceBuffer::Download(void* host, size_t bytes) const {
  if (bytes > bytes_) {
    return InvalidArgument(StrCat("download of ", bytes, " bytes from a buffer of ", bytes_));
  }
  if (bytes == 0) return Status();
  if (host == nullptr) return InvalidArgument("download into a null host pointer");
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  return CONVT3D_CU_STATUS(cuMemcpyDtoH(host, static_cast<CUdeviceptr>(ptr_), bytes));
}

Status DeviceBuffer::FillBytes(uint8_t value) {
  if (bytes_ == 0) return Status();
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  CONVT3D_CU_RETURN_IF_ERROR(cuMemsetD8(static_cast<CUdeviceptr>(ptr_), value, bytes_));
  // cuMemsetD8 on device memory is asynchronous to the host; callers rely on it being done.
  return CONVT3D_CU_STATUS(cuStreamSynchronize(nullptr));
}

Status DeviceBuffer::FillBytes(uint8_t value, CUstream_st* stream) {
  if (stream == nullptr) return FillBytes(value);
  if (bytes_ == 0) return Status();
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  CONVT3D_CU_RETURN_IF_ERROR(
      cuMemsetD8Async(static_cast<CUdeviceptr>(ptr_), value, bytes_, stream));
  return CONVT3D_CU_STATUS(cuStreamSynchronize(stream));
}

Status DeviceBuffer::CopyFromAsync(const DeviceBuffer& src, size_t bytes) {
  if (bytes > bytes_ || bytes > src.bytes_)
    return InvalidArgument(
        StrCat("copy of ", bytes, " bytes between buffers of ", src.bytes_, " and ", bytes_));
  if (bytes == 0) return Status();
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  return CONVT3D_CU_STATUS(cuMemcpyDtoDAsync(static_cast<CUdeviceptr>(ptr_),
                                             static_cast<CUdeviceptr>(src.ptr_), bytes, nullptr));
}

// ---- Kernel ----------------------------------------------------------------------------------

StatusOr<std::shared_ptr<Kernel>> Kernel::Load(const std::vector<char>& cubin,
                                               const std::string& symbol) {
  if (cubin.empty()) return InvalidArgument(StrCat("kernel ", symbol, ": empty cubin"));
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  // Owned from the start, so the destructor unloads the module on every error path below.
  std::shared_ptr<Kernel> kernel(new Kernel);
  kernel->symbol_ = symbol;
  const std::string what = StrCat("kernel ", symbol);
  CUmodule module = nullptr;
  CONVT3D_RETURN_IF_ERROR(
      WithContext(what, CONVT3D_CU_STATUS(cuModuleLoadData(&module, cubin.data()))));
  kernel->module_ = module;
  CUfunction func = nullptr;
  CONVT3D_RETURN_IF_ERROR(
      WithContext(what, CONVT3D_CU_STATUS(cuModuleGetFunction(&func, module, symbol.c_str()))));
  kernel->func_ = func;
  const std::pair<CUfunction_attribute, int*> attributes[] = {
      {CU_FUNC_ATTRIBUTE_NUM_REGS, &kernel->regs_},
      {CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &kernel->local_bytes_},
      {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &kernel->max_threads_},
  };
  for (const auto& [attribute, out] : attributes) {
    CONVT3D_RETURN_IF_ERROR(
        WithContext(what, CONVT3D_CU_STATUS(cuFuncGetAttribute(out, attribute, func))));
  }
  CUdevice dev = 0;
  CONVT3D_RETURN_IF_ERROR(WithContext(what, CONVT3D_CU_STATUS(cuCtxGetDevice(&dev))));
  CONVT3D_RETURN_IF_ERROR(
      WithContext(what, CONVT3D_CU_STATUS(cuDeviceGetAttribute(
                            &kernel->sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))));
  return kernel;
}

Kernel::~Kernel() {
  if (module_ != nullptr) (void)Cu().cuModuleUnload(AsModule(module_));
}

Status Kernel::SetMaxDynamicSharedBytes(int bytes) const {
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  const CUfunction f = AsFunction(func_);
  const CUfunction_attribute attribute = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  return WithContext(StrCat("kernel ", symbol_, ": allowing ", bytes, " bytes of dynamic smem"),
                     CONVT3D_CU_STATUS(cuFuncSetAttribute(f, attribute, bytes)));
}

Status Kernel::Launch(const unsigned grid[3], const unsigned block[3], unsigned smem_bytes,
                      CUstream_st* stream, void** args, bool overlap_previous) const {
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  if (smem_bytes > dynamic_smem_allowed_.load()) {
    CONVT3D_RETURN_IF_ERROR(SetMaxDynamicSharedBytes(static_cast<int>(smem_bytes)));
    dynamic_smem_allowed_.store(smem_bytes);
  }
  // One launch path: without attributes cuLaunchKernelEx is cuLaunchKernel.
  CUlaunchAttribute attribute = {};
  attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config = {};
  config.gridDimX = grid[0], config.gridDimY = grid[1], config.gridDimZ = grid[2];
  config.blockDimX = block[0], config.blockDimY = block[1], config.blockDimZ = block[2];
  config.sharedMemBytes = smem_bytes;
  config.hStream = stream;
  config.attrs = &attribute;
  config.numAttrs = overlap_previous ? 1 : 0;
  const Status s = CONVT3D_CU_STATUS(cuLaunchKernelEx(&config, AsFunction(func_), args, nullptr));
  if (s.ok()) return s;
  return WithContext(
      StrCat("launching ", symbol_, overlap_previous ? " (overlapping the previous kernel)" : "",
             " grid (", grid[0], ",", grid[1], ",", grid[2], ") block (", block[0], ",", block[1],
             ",", block[2], ") smem ", smem_bytes),
      s);
}

StatusOr<TensorMap> EncodeTiledMap(const TiledMapShape& shape, const void* base) {
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  static_assert(sizeof(TensorMap) == sizeof(CUtensorMap) && alignof(TensorMap) >= 64);
  const bool shape_ok = shape.rank >= 1 && shape.rank <= 5 &&
                        (shape.elem_bytes == 2 || shape.elem_bytes == 4) &&
                        (shape.swizzle_bytes == 0 || shape.swizzle_bytes == 32 ||
                         shape.swizzle_bytes == 64 || shape.swizzle_bytes == 128);
  auto describe = [&] {
    std::string d = StrCat("rank ", shape.rank, ", ", shape.elem_bytes, "-byte elements, dims");
    for (int i = 0; i < shape.rank; ++i) d += StrCat(" ", shape.dims[i]);
    d += ", box";
    for (int i = 0; i < shape.rank; ++i) d += StrCat(" ", shape.box[i]);
    return StrCat(d, ", swizzle ", shape.swizzle_bytes, " B, base ", base);
  };
  if (!shape_ok)
    return InvalidArgument(StrCat("tiled tensor map: unsupported shape (", describe(), ")"));
  const uint32_t element_strides[5] = {1, 1, 1, 1, 1};
  const CUtensorMapSwizzle swizzle = shape.swizzle_bytes == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : shape.swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                     : shape.swizzle_bytes == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                                 : CU_TENSOR_MAP_SWIZZLE_NONE;
  TensorMap map;
  Status s = CONVT3D_CU_STATUS(cuTensorMapEncodeTiled(
      reinterpret_cast<CUtensorMap*>(&map),
      shape.elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT32,
      static_cast<cuuint32_t>(shape.rank), const_cast<void*>(base), shape.dims, shape.strides_bytes,
      shape.box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  if (!s.ok()) return WithContext(StrCat("encoding a tiled tensor map (", describe(), ")"), s);
  return map;
}

bool StreamIsCapturing(CUstream_st* stream) {
  if (!LoadDriver().ok()) return true;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (Cu().cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS) return true;
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

Status Synchronize() {
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  return CONVT3D_CU_STATUS(cuCtxSynchronize());
}

Status Synchronize(CUstream_st* stream) {
  if (stream == nullptr) return Synchronize();
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  return CONVT3D_CU_STATUS(cuStreamSynchronize(stream));
}

StatusOr<std::unique_ptr<Stream>> Stream::CreateLowPriority() {
  CONVT3D_RETURN_IF_ERROR(LoadDriver());
  std::unique_ptr<Stream> s(new Stream());
  CUstream raw = nullptr;
  // A priority outside the device's range is clamped to it: INT_MAX gives the least priority
  // (0 on the GPUs so far, also the default: streams of higher priority go first).
  CONVT3D_CU_RETURN_IF_ERROR(cuStreamCreateWithPriority(&raw, CU_STREAM_NON_BLOCKING, INT_MAX));
  s->stream_ = raw;
  return s;
}

Stream::~Stream() {
  if (stream_ != nullptr) (void)Cu().cuStreamDestroy(stream_);
}

}  // namespace convt3d::rt
