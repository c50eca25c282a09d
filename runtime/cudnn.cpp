// cudnn.cpp: finds and dlopens libcudnn.so.9, resolves its entry points, runs backward-data.
#include "runtime/cudnn.h"

#include <dlfcn.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "base/dl.h"
#include "base/status.h"
#include "runtime/runtime.h"

#if CONVT3D_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace convt3d::cudnn {

// ---- Mapping (pure) --------------------------------------------------------------------------

StatusOr<BackwardDataDims> MapConvTranspose3d(const Problem& p) {
  CONVT3D_RETURN_IF_ERROR(Validate(p));
  constexpr const char* kAxis[3] = {"D", "H", "W"};
  const Dim3 out = p.OutSize();
  // cuDNN's Nd descriptors take int dims and strides; the largest stride is a tensor's size.
  const int64_t biggest = std::max({p.InputElements(), p.OutputElements(), p.WeightElements()});
  if (biggest > INT_MAX) {
    return Unavailable(StrCat("a tensor of ", biggest,
                              " elements exceeds cuDNN's int descriptors (at most ", INT_MAX, ")"));
  }
  for (int i = 0; i < 3; ++i) {
    // The forward convolution of dx must give back dy's size, or cuDNN refuses the descriptors.
    const int64_t fwd =
        (out[i] + 2 * p.padding[i] - p.dilation[i] * (p.kernel[i] - 1) - 1) / p.stride[i] + 1;
    if (fwd != p.in[i]) {
      return Unavailable(StrCat("output_padding[", i, "]=", p.output_padding[i], " (", kAxis[i],
                                ") is not less than stride=", p.stride[i],
                                ": cuDNN backward-data cannot express it"));
    }
  }
  BackwardDataDims d;
  auto packed = [](const std::array<int, 5>& dims) {
    std::array<int, 5> s{};
    s[4] = 1;
    for (int i = 3; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
    return s;
  };
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  d.dy_dims = {i32(p.n), i32(p.c_in), i32(p.in[0]), i32(p.in[1]), i32(p.in[2])};
  d.dx_dims = {i32(p.n), i32(p.c_out), i32(out[0]), i32(out[1]), i32(out[2])};
  d.w_dims = {i32(p.c_in), i32(p.c_out / p.groups), i32(p.kernel[0]), i32(p.kernel[1]),
              i32(p.kernel[2])};
  d.bias_dims = {1, i32(p.c_out), 1, 1, 1};
  d.dy_strides = packed(d.dy_dims);
  d.dx_strides = packed(d.dx_dims);
  d.bias_strides = packed(d.bias_dims);
  for (int i = 0; i < 3; ++i) {
    d.pad[i] = i32(p.padding[i]);
    d.stride[i] = i32(p.stride[i]);
    d.dilation[i] = i32(p.dilation[i]);
  }
  d.groups = i32(p.groups);
  return d;
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kTf32:
      return "tf32";
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kF16:
      return "f16";
  }
  return "?";
}

std::optional<Precision> PrecisionFor(const Problem& p) {
  switch (p.dtype) {
    case DType::kBF16:
      return Precision::kBf16;
    case DType::kF16:
      return Precision::kF16;
    case DType::kF64:
      return std::nullopt;
    case DType::kF32:
      break;
  }
  return p.precision == convt3d::Precision::kTf32 ? Precision::kTf32 : Precision::kFp32;
}

namespace {
constexpr const char* kAlgorithmNames[kAlgorithms] = {
    "ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
}  // namespace

const char* AlgorithmName(int algo) {
  return algo >= 0 && algo < kAlgorithms ? kAlgorithmNames[algo] : "ALGO_?";
}

int AlgorithmFromName(const std::string& name) {
  for (int a = 0; a < kAlgorithms; ++a)
    if (name == kAlgorithmNames[a]) return a;
  return -1;
}

std::string Library::VersionString() const {
  // cuDNN 9 encodes major*10000 + minor*100 + patch.
  return StrCat(version_ / 10000, ".", (version_ % 10000) / 100, ".", version_ % 100);
}

namespace {
constexpr const char* kSoname = "libcudnn.so.9";
}  // namespace

std::vector<std::string> WheelLibraries() {
  // Under a Python prefix: the wheel's library in any python3.x's site-packages.
  auto under = [](const std::string& prefix, const char* packages = "site-packages") {
    return StrCat(prefix, "/lib/python3*/", packages, "/nvidia/cudnn/lib/", kSoname);
  };
  std::vector<std::string> patterns = {under("/usr", "*-packages"),
                                       under("/usr/local", "*-packages")};
  const char* home = std::getenv("HOME");
  if (home && *home) patterns.push_back(under(StrCat(home, "/.local")));
  for (const char* prefix_var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* prefix = std::getenv(prefix_var); prefix && *prefix)
      patterns.push_back(under(prefix));
  // A venv or conda environment used without activating it: the prefix of each python3 on PATH.
  if (const char* path = std::getenv("PATH"); path && *path) {
    std::istringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      const size_t slash = dir.find_last_of('/');
      if (slash != std::string::npos && access((dir + "/python3").c_str(), X_OK) == 0)
        patterns.push_back(under(dir.substr(0, slash)));
    }
  }
  if (const char* root = std::getenv("PYENV_ROOT"); root && *root)
    patterns.push_back(under(StrCat(root, "/versions/*")));
  else if (home && *home)
    patterns.push_back(under(StrCat(home, "/.pyenv/versions/*")));
  std::vector<std::string> found;
  for (const std::string& pattern : patterns) {
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i)
        if (std::find(found.begin(), found.end(), g.gl_pathv[i]) == found.end())
          found.emplace_back(g.gl_pathv[i]);
    }
    globfree(&g);
  }
  return found;
}

#if CONVT3D_HAVE_CUDNN

namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

// X(name) for every cuDNN function used here; the table, its loader and the names in error
// messages all come from this one list.
#define CONVT3D_FOR_EACH_CUDNN(X)                     \
  X(cudnnGetVersion)                                  \
  X(cudnnGetErrorString)                              \
  X(cudnnGetLastErrorString)                          \
  X(cudnnCreate)                                      \
  X(cudnnDestroy)                                     \
  X(cudnnSetStream)                                   \
  X(cudnnCreateTensorDescriptor)                      \
  X(cudnnDestroyTensorDescriptor)                     \
  X(cudnnSetTensorNdDescriptor)                       \
  X(cudnnCreateFilterDescriptor)                      \
  X(cudnnDestroyFilterDescriptor)                     \
  X(cudnnSetFilterNdDescriptor)                       \
  X(cudnnCreateConvolutionDescriptor)                 \
  X(cudnnDestroyConvolutionDescriptor)                \
  X(cudnnSetConvolutionNdDescriptor)                  \
  X(cudnnSetConvolutionGroupCount)                    \
  X(cudnnSetConvolutionMathType)                      \
  X(cudnnGetConvolutionNdForwardOutputDim)            \
  X(cudnnGetConvolutionBackwardDataAlgorithmMaxCount) \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)     \
  X(cudnnFindConvolutionBackwardDataAlgorithmEx)      \
  X(cudnnConvolutionBackwardData)                     \
  X(cudnnAddTensor)

struct Api {
#define CONVT3D_CUDNN_MEMBER(name) decltype(&::name) name = nullptr;
  CONVT3D_FOR_EACH_CUDNN(CONVT3D_CUDNN_MEMBER)
#undef CONVT3D_CUDNN_MEMBER
};

namespace {

// cuDNN keeps a per-thread text of the last error; reading it also clears it, so that a later
// failure never reports an earlier, expected one (e.g. an algorithm's NOT_SUPPORTED probe).
std::string TakeLastError(const Api& api) {
  char last[1024] = {0};
  api.cudnnGetLastErrorString(last, sizeof last);
  std::string s = last;
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s.substr(0, 400);
}

// "cudnnSetTensorNdDescriptor: CUDNN_STATUS_BAD_PARAM (cuDNN's own explanation)".
Status Check(const Api& api, const char* call, cudnnStatus_t s) {
  if (s == CUDNN_STATUS_SUCCESS) return Status();
  std::string msg = StrCat(call, ": ", api.cudnnGetErrorString(s));
  const std::string detail = TakeLastError(api);
  if (!detail.empty()) msg += StrCat(" (", detail, ")");
  return Internal(msg);
}

#define CONVT3D_CUDNN_STATUS(api, fn, ...) Check((api), #fn, (api).fn(__VA_ARGS__))
#define CONVT3D_CUDNN_RETURN_IF_ERROR(api, fn, ...) \
  CONVT3D_RETURN_IF_ERROR(CONVT3D_CUDNN_STATUS(api, fn, __VA_ARGS__))

// A descriptor destroyed with the table's matching Destroy call when it goes out of scope.
template <typename T>
struct Desc {
  T d = nullptr;
  cudnnStatus_t (*destroy)(T) = nullptr;
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (d != nullptr && destroy != nullptr) (void)destroy(d);
  }
};

static_assert(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT == kAlgorithms &&
                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 == 1 &&
                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED == 5,
              "kAlgorithmNames follows cudnnConvolutionBwdDataAlgo_t");
const char* AlgoName(cudnnConvolutionBwdDataAlgo_t a) { return AlgorithmName(static_cast<int>(a)); }

const char* MathName(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH:
      return "DEFAULT_MATH";
    case CUDNN_TENSOR_OP_MATH:
      return "TENSOR_OP_MATH";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "TENSOR_OP_MATH_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH:
      return "FMA_MATH";
    default:
      return "MATH_?";
  }
}

std::string Bytes(size_t b) {
  if (b >= (size_t{1} << 20)) return StrCat(b >> 20, " MiB");
  if (b >= 1024) return StrCat(b >> 10, " KiB");
  return StrCat(b, " B");
}

}  // namespace

// ---- Library ---------------------------------------------------------------------------------

StatusOr<std::shared_ptr<const Library>> Library::Open(const std::string& file, bool* not_found) {
  *not_found = false;
  dlerror();
  // The handle is never closed: see Load().
  void* so = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (so == nullptr) {
    *not_found = true;
    return Unavailable(DlError());
  }
  auto api = std::make_shared<Api>();
  std::string missing;
#define CONVT3D_CUDNN_RESOLVE(name)                                  \
  api->name = reinterpret_cast<decltype(&::name)>(dlsym(so, #name)); \
  if (api->name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #name;
  CONVT3D_FOR_EACH_CUDNN(CONVT3D_CUDNN_RESOLVE)
#undef CONVT3D_CUDNN_RESOLVE
  if (!missing.empty()) return Unavailable(StrCat(file, " lacks ", missing));
  std::shared_ptr<Library> lib(new Library);
  lib->version_ = api->cudnnGetVersion();
  if (lib->version_ / 10000 != 9)
    return Unavailable(StrCat(file, " is cuDNN ", lib->VersionString(), ", not 9.x"));
  // For a bare soname, dladdr names the file the loader really picked.
  lib->path_ = file;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(api->cudnnGetVersion), &info) != 0 && info.dli_fname)
    lib->path_ = info.dli_fname;
  lib->api_ = std::move(api);
  return std::shared_ptr<const Library>(std::move(lib));
}

StatusOr<std::shared_ptr<const Library>> Library::Load() {
  bool not_found = false;
  if (const char* env = std::getenv("CONVT3D_CUDNN"); env != nullptr && *env != '\0') {
    std::string file = env;
    if (IsDirectory(file)) file += std::string("/") + kSoname;
    auto lib = Open(file, &not_found);
    if (lib.ok()) return lib;
    return Unavailable(StrCat("CONVT3D_CUDNN=", env, ": ", lib.status().message()));
  }
  auto lib = Open(kSoname, &not_found);
  if (lib.ok()) return lib;
  std::string why = StrCat("default loader path: ", lib.status().message());
  const std::vector<std::string> wheels = WheelLibraries();
  for (const std::string& file : wheels) {
    auto w = Open(file, &not_found);
    if (w.ok()) return w;
    why += StrCat("; ", w.status().message());
  }
  if (wheels.empty()) why += "; no nvidia/cudnn/lib in python site-packages";
  return Unavailable(
      StrCat(kSoname, " not found (", why, "); set CONVT3D_CUDNN to the file or its directory"));
}

// ---- Handle ----------------------------------------------------------------------------------

StatusOr<std::shared_ptr<Handle>> Handle::Create(std::shared_ptr<const Library> library) {
  if (!library) return InvalidArgument("cudnn::Handle::Create: no library");
  std::shared_ptr<Handle> h(new Handle);
  h->library_ = std::move(library);
  cudnnHandle_t raw = nullptr;
  CONVT3D_CUDNN_RETURN_IF_ERROR(h->library_->api(), cudnnCreate, &raw);
  h->handle_ = raw;
  return h;
}

Handle::~Handle() {
  if (handle_ != nullptr) (void)library_->api().cudnnDestroy(static_cast<cudnnHandle_t>(handle_));
}

// ---- BackwardData ----------------------------------------------------------------------------

namespace {

// The five descriptors of one problem in one precision; needs no handle and no GPU.
struct Descriptors {
  Desc<cudnnTensorDescriptor_t> dy, dx, bias;
  Desc<cudnnFilterDescriptor_t> w;
  Desc<cudnnConvolutionDescriptor_t> conv;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

Status BuildDescriptors(const Api& api, const Problem& problem, Precision precision,
                        Descriptors* m) {
  CONVT3D_ASSIGN_OR_RETURN(const BackwardDataDims d, MapConvTranspose3d(problem));
  const cudnnDataType_t data = precision == Precision::kBf16  ? CUDNN_DATA_BFLOAT16
                               : precision == Precision::kF16 ? CUDNN_DATA_HALF
                                                              : CUDNN_DATA_FLOAT;
  // PyTorch's choices (aten/src/ATen/cudnn/Descriptors.h): fp32 accumulation for 16-bit data;
  // DEFAULT math lets fp32 use TF32, FMA math forbids it, TENSOR_OP math for reduced types.
  m->math = precision == Precision::kTf32   ? CUDNN_DEFAULT_MATH
            : precision == Precision::kFp32 ? CUDNN_FMA_MATH
                                            : CUDNN_TENSOR_OP_MATH;
  for (auto* t : {&m->dy, &m->dx, &m->bias}) {
    t->destroy = api.cudnnDestroyTensorDescriptor;
    CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnCreateTensorDescriptor, &t->d);
  }
  m->w.destroy = api.cudnnDestroyFilterDescriptor;
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnCreateFilterDescriptor, &m->w.d);
  m->conv.destroy = api.cudnnDestroyConvolutionDescriptor;
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnCreateConvolutionDescriptor, &m->conv.d);

  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnSetTensorNdDescriptor, m->dy.d, data, 5, d.dy_dims.data(),
                                d.dy_strides.data());
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnSetTensorNdDescriptor, m->dx.d, data, 5, d.dx_dims.data(),
                                d.dx_strides.data());
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnSetTensorNdDescriptor, m->bias.d, data, 5,
                                d.bias_dims.data(), d.bias_strides.data());
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnSetFilterNdDescriptor, m->w.d, data, CUDNN_TENSOR_NCHW, 5,
                                d.w_dims.data());
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnSetConvolutionNdDescriptor, m->conv.d, 3, d.pad.data(),
                                d.stride.data(), d.dilation.data(), CUDNN_CROSS_CORRELATION,
                                CUDNN_DATA_FLOAT);
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnSetConvolutionGroupCount, m->conv.d, d.groups);
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnSetConvolutionMathType, m->conv.d, m->math);
  // cuDNN's own arithmetic must take dx back onto dy through the filter: this catches a wrong
  // mapping here, before any GPU work, with both shapes in the message.
  std::array<int, 5> fwd{};
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnGetConvolutionNdForwardOutputDim, m->conv.d, m->dx.d,
                                m->w.d, 5, fwd.data());
  if (fwd != d.dy_dims) {
    auto str = [](const std::array<int, 5>& a) {
      return StrCat("[", a[0], ", ", a[1], ", ", a[2], ", ", a[3], ", ", a[4], "]");
    };
    return Internal(
        StrCat("cuDNN maps dx ", str(d.dx_dims), " to ", str(fwd), ", not to dy ", str(d.dy_dims)));
  }
  return Status();
}

}  // namespace

Status VerifyDescriptors(const Library& library, const Problem& problem, Precision precision) {
  Descriptors m;
  return BuildDescriptors(library.api(), problem, precision, &m);
}

namespace {

// dx = backward-data(w, dy) (+ bias) on `stream`, holding the handle's mutex from binding the
// stream to the last call: the handle's stream is state shared by every user of the handle.
Status RunBackwardData(const Handle& handle, const Descriptors& desc,
                       cudnnConvolutionBwdDataAlgo_t algo, const void* w, const void* dy,
                       const void* bias, void* dx, void* workspace, size_t workspace_bytes,
                       CUstream_st* stream) {
  const Api& api = handle.library().api();
  const auto h = static_cast<cudnnHandle_t>(handle.get());
  std::lock_guard<std::mutex> lock(handle.mutex());
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnSetStream, h, stream);
  // Scaling factors are float for float and 16-bit data alike.
  const float one = 1.0f, zero = 0.0f;
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnConvolutionBackwardData, h, &one, desc.w.d, w, desc.dy.d,
                                dy, desc.conv.d, algo, workspace, workspace_bytes, &zero, desc.dx.d,
                                dx);
  if (bias != nullptr) {
    CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnAddTensor, h, &one, desc.bias.d, bias, &one, desc.dx.d,
                                  dx);
  }
  return Status();
}

}  // namespace

struct BackwardData::Impl {
  std::shared_ptr<Handle> handle;
  Descriptors desc;
  bool has_bias = false, searched = false;
  cudnnConvolutionBwdDataAlgo_t algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  rt::DeviceBuffer workspace;

  const Api& api() const { return handle->library().api(); }
  cudnnHandle_t h() const { return static_cast<cudnnHandle_t>(handle->get()); }
};

StatusOr<std::unique_ptr<BackwardData>> BackwardData::Create(std::shared_ptr<Handle> handle,
                                                             const Problem& problem,
                                                             Precision precision) {
  if (!handle) return InvalidArgument("cudnn::BackwardData::Create: no handle");
  std::unique_ptr<BackwardData> bd(new BackwardData);
  bd->impl_ = std::make_unique<Impl>();
  bd->precision_ = precision;
  Impl& m = *bd->impl_;
  m.handle = std::move(handle);
  m.has_bias = problem.bias;
  CONVT3D_RETURN_IF_ERROR(BuildDescriptors(m.api(), problem, precision, &m.desc));
  bd->math_name_ = MathName(m.desc.math);
  return bd;
}

BackwardData::~BackwardData() = default;

size_t BackwardData::workspace_bytes() const { return impl_ ? impl_->workspace.size() : 0; }

Status BackwardData::Search(const void* w, const void* dy, void* dx) {
  Impl& m = *impl_;
  const Api& api = m.api();
  std::lock_guard<std::mutex> lock(m.handle->mutex());
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnSetStream, m.h(), nullptr);
  int max_count = 0;
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnGetConvolutionBackwardDataAlgorithmMaxCount, m.h(),
                                &max_count);
  // The workspace the hungriest algorithm asks for, as PyTorch sizes its search; algorithms
  // that do not apply answer NOT_SUPPORTED here and are simply not counted.
  size_t want = 0;
  for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; ++a) {
    size_t bytes = 0;
    const cudnnStatus_t s = api.cudnnGetConvolutionBackwardDataWorkspaceSize(
        m.h(), m.desc.w.d, m.desc.dy.d, m.desc.conv.d, m.desc.dx.d,
        static_cast<cudnnConvolutionBwdDataAlgo_t>(a), &bytes);
    if (s == CUDNN_STATUS_SUCCESS) want = std::max(want, bytes);
  }
  (void)TakeLastError(api);
  // Halve until it fits: the search then reports the algorithms that needed more as failed.
  rt::DeviceBuffer ws;
  for (;;) {
    auto buf = rt::DeviceBuffer::Alloc(want);
    if (buf.ok()) {
      ws = std::move(*buf);
      break;
    }
    if (want == 0) return buf.status();
    want /= 2;
  }
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::max(max_count, 1));
  int returned = 0;
  CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnFindConvolutionBackwardDataAlgorithmEx, m.h(), m.desc.w.d,
                                w, m.desc.dy.d, dy, m.desc.conv.d, m.desc.dx.d, dx,
                                static_cast<int>(perf.size()), &returned, perf.data(), ws.get(),
                                ws.size());
  search_log_.clear();
  int best = -1;
  for (int i = 0; i < returned; ++i) {
    const auto& r = perf[i];
    const bool ok = r.status == CUDNN_STATUS_SUCCESS && r.time >= 0;
    search_log_.push_back(StrCat(AlgoName(r.algo), " ",
                                 ok ? "ok" : api.cudnnGetErrorString(r.status), " ", r.time, " ms ",
                                 Bytes(r.memory), " ", MathName(r.mathType)));
    if (ok && (best < 0 || r.time < perf[best].time)) best = i;
  }
  (void)TakeLastError(api);
  if (best < 0) {
    std::string log;
    for (const auto& l : search_log_) log += (log.empty() ? "" : "; ") + l;
    return Internal(StrCat("cudnnFindConvolutionBackwardDataAlgorithmEx: no algorithm succeeded (",
                           returned, " tried, workspace ", Bytes(ws.size()), ": ", log, ")"));
  }
  const auto& pick = perf[best];
  m.algo = pick.algo;
  algo_name_ = AlgoName(pick.algo);
  search_ms_ = pick.time;
  // Run with the math type the search timed (PyTorch does the same), except that strict fp32
  // keeps FMA math whatever the result says: anything else could let TF32 in.
  if (precision_ != Precision::kFp32) {
    CONVT3D_CUDNN_RETURN_IF_ERROR(api, cudnnSetConvolutionMathType, m.desc.conv.d, pick.mathType);
    math_name_ = MathName(pick.mathType);
  }
  // Keep only what the pick needs, so later buffers and modes have the memory back.
  ws = rt::DeviceBuffer();
  CONVT3D_ASSIGN_OR_RETURN(m.workspace, rt::DeviceBuffer::Alloc(pick.memory));
  m.searched = true;
  return Status();
}

Status BackwardData::Run(const void* w, const void* dy, const void* bias, void* dx) const {
  const Impl& m = *impl_;
  if (!m.searched) return FailedPrecondition("cudnn::BackwardData::Run before Search()");
  if (m.has_bias && bias == nullptr)
    return InvalidArgument("cudnn::BackwardData::Run: the problem has a bias but none was given");
  return RunBackwardData(*m.handle, m.desc, m.algo, w, dy, m.has_bias ? bias : nullptr, dx,
                         m.workspace.get(), m.workspace.size(), nullptr);
}

// ---- Algorithm -------------------------------------------------------------------------------

struct Algorithm::Desc {
  Descriptors d;
};

StatusOr<std::shared_ptr<const Algorithm>> Algorithm::Create(std::shared_ptr<Handle> handle,
                                                             const Problem& problem,
                                                             Precision precision, int algo) {
  if (!handle) return InvalidArgument("cudnn::Algorithm::Create: no handle");
  if (algo < 0 || algo >= kAlgorithms)
    return InvalidArgument(StrCat("cudnn::Algorithm::Create: no algorithm ", algo));
  std::shared_ptr<Algorithm> a(new Algorithm);
  a->handle_ = std::move(handle);
  a->desc_ = std::make_unique<Desc>();
  a->algo_ = algo;
  a->precision_ = precision;
  a->has_bias_ = problem.bias;
  const Api& api = a->handle_->library().api();
  Status built = BuildDescriptors(api, problem, precision, &a->desc_->d);
  if (!built.ok()) return Unavailable(built.message());
  a->math_name_ = MathName(a->desc_->d.math);
  const Descriptors& d = a->desc_->d;
  size_t bytes = 0;
  cudnnStatus_t s;
  {
    std::lock_guard<std::mutex> lock(a->handle_->mutex());
    s = api.cudnnGetConvolutionBackwardDataWorkspaceSize(
        static_cast<cudnnHandle_t>(a->handle_->get()), d.w.d, d.dy.d, d.conv.d, d.dx.d,
        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes);
  }
  // An algorithm that does not apply answers here; that is not an error, only no candidate.
  if (s != CUDNN_STATUS_SUCCESS) {
    const Status st = Check(api, "cudnnGetConvolutionBackwardDataWorkspaceSize", s);
    return Unavailable(StrCat(AlgorithmName(algo), " ", a->math_name_, ": ", st.message()));
  }
  a->workspace_bytes_ = bytes;
  return std::shared_ptr<const Algorithm>(std::move(a));
}

Algorithm::~Algorithm() = default;

Status Algorithm::Run(const void* x, const void* w, const void* bias, void* y, void* workspace,
                      CUstream_st* stream) const {
  if (has_bias_ && bias == nullptr)
    return InvalidArgument("cudnn::Algorithm::Run: the problem has a bias but none was given");
  if (workspace_bytes_ > 0 && workspace == nullptr)
    return InvalidArgument(StrCat("cudnn::Algorithm::Run: ", name(), " needs a ", workspace_bytes_,
                                  "-byte workspace"));
  return RunBackwardData(*handle_, desc_->d, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo_), w,
                         x, has_bias_ ? bias : nullptr, y, workspace, workspace_bytes_, stream);
}

#else  // !CONVT3D_HAVE_CUDNN: built where no cudnn.h was found; everything says so.

struct Api {};
struct BackwardData::Impl {};
struct Algorithm::Desc {};

namespace {
Status NoHeaders() {
  return Unavailable(
      "this convt3d was built without cudnn.h, so it cannot call cuDNN (configure it where the "
      "cuDNN headers are installed)");
}
}  // namespace

StatusOr<std::shared_ptr<const Library>> Library::Open(const std::string&, bool* not_found) {
  *not_found = true;
  return NoHeaders();
}
StatusOr<std::shared_ptr<const Library>> Library::Load() { return NoHeaders(); }
StatusOr<std::shared_ptr<Handle>> Handle::Create(std::shared_ptr<const Library>) {
  return NoHeaders();
}
Handle::~Handle() = default;
StatusOr<std::unique_ptr<BackwardData>> BackwardData::Create(std::shared_ptr<Handle>,
                                                             const Problem&, Precision) {
  return NoHeaders();
}
BackwardData::~BackwardData() = default;
size_t BackwardData::workspace_bytes() const { return 0; }
Status BackwardData::Search(const void*, const void*, void*) { return NoHeaders(); }
Status VerifyDescriptors(const Library&, const Problem&, Precision) { return NoHeaders(); }
Status BackwardData::Run(const void*, const void*, const void*, void*) const { return NoHeaders(); }
StatusOr<std::shared_ptr<const Algorithm>> Algorithm::Create(std::shared_ptr<Handle>,
                                                             const Problem&, Precision, int) {
  return NoHeaders();
}
Algorithm::~Algorithm() = default;
Status Algorithm::Run(const void*, const void*, const void*, void*, void*, CUstream_st*) const {
  return NoHeaders();
}

#endif  // CONVT3D_HAVE_CUDNN

}  // namespace convt3d::cudnn
