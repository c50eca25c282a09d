// c_api.cpp: the C API (convt3d_c.h) as a thin layer over the C++ API, catching every exception.
//
// Only the public header is used, so the same file builds into the static library and into
// libconvt3d.so (where it is the only exported surface).
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <utility>

#include "convt3d/convt3d.h"
#include "convt3d/convt3d_c.h"

struct convt3d_engine {
  explicit convt3d_engine(convt3d::Engine e) : engine(std::move(e)) {}
  convt3d::Engine engine;
  convt3d::Precision precision = convt3d::Precision::kFp32;  // for every f32 plan
  std::string cache_path, cache_warning;  // kept here so that the C strings stay valid
};

struct convt3d_plan {
  explicit convt3d_plan(convt3d::Plan p) : plan(std::move(p)) {}
  convt3d::Plan plan;
};

namespace {

using convt3d::Code;
using convt3d::Status;

// Per thread, so that concurrent callers never see each other's messages.
thread_local std::string g_last_error;

template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

Status Invalid(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }

convt3d_status_t Finish(const Status& s) {
  if (s.ok()) {
    g_last_error.clear();
    return CONVT3D_OK;
  }
  g_last_error = s.message();
  return static_cast<convt3d_status_t>(s.code());
}

// Runs `body` (returning a Status) so that no exception escapes into C.
template <typename F>
convt3d_status_t Guard(F&& body) {
  try {
    return Finish(body());
  } catch (const std::bad_alloc&) {
    return Finish(Status(Code::kInternal, "out of host memory"));
  } catch (const std::exception& e) {
    return Finish(Status(Code::kInternal, Cat("unexpected C++ exception: ", e.what())));
  } catch (...) {
    return Finish(Status(Code::kInternal, "unexpected C++ exception"));
  }
}

// The C enums' codes and the C++ enums' values, for both directions.
constexpr std::pair<int32_t, convt3d::DType> kDTypes[] = {
    {CONVT3D_DTYPE_F32, convt3d::DType::kF32},
    {CONVT3D_DTYPE_F64, convt3d::DType::kF64},
    {CONVT3D_DTYPE_BF16, convt3d::DType::kBF16},
    {CONVT3D_DTYPE_F16, convt3d::DType::kF16},
};
constexpr std::pair<int32_t, convt3d::TunePolicy> kPolicies[] = {
    {CONVT3D_POLICY_NEVER, convt3d::TunePolicy::kNever},
    {CONVT3D_POLICY_CACHE_OR_HEURISTIC, convt3d::TunePolicy::kCacheOrHeuristic},
    {CONVT3D_POLICY_TUNE_IF_MISSING, convt3d::TunePolicy::kTuneIfMissing},
    {CONVT3D_POLICY_EXHAUSTIVE, convt3d::TunePolicy::kExhaustive},
    {CONVT3D_POLICY_BACKGROUND, convt3d::TunePolicy::kBackground},
};
constexpr std::pair<int32_t, const char*> kStatusNames[] = {
    {CONVT3D_OK, "OK"},
    {CONVT3D_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
    {CONVT3D_FAILED_PRECONDITION, "FAILED_PRECONDITION"},
    {CONVT3D_NOT_FOUND, "NOT_FOUND"},
    {CONVT3D_UNAVAILABLE, "UNAVAILABLE"},
    {CONVT3D_INTERNAL, "INTERNAL"},
};

// The value of `code` in a table above, or null when the code is not in it.
template <typename T, size_t N>
const T* ValueOf(const std::pair<int32_t, T> (&table)[N], int32_t code) {
  for (const auto& [c, value] : table)
    if (c == code) return &value;
  return nullptr;
}
// The code of `value`; the table's first code for a value outside the enum.
template <typename T, size_t N>
int32_t CodeOf(const std::pair<int32_t, T> (&table)[N], T value) {
  for (const auto& [code, v] : table)
    if (v == value) return code;
  return table[0].first;
}

// The fields that convt3d_problem_t and convt3d::Problem share by name, either way.
template <typename From, typename To>
void CopyShape(const From& from, To* to) {
  to->n = from.n;
  to->c_in = from.c_in;
  to->c_out = from.c_out;
  for (int i = 0; i < 3; ++i) {
    to->in[i] = from.in[i];
    to->kernel[i] = from.kernel[i];
    to->stride[i] = from.stride[i];
    to->padding[i] = from.padding[i];
    to->output_padding[i] = from.output_padding[i];
    to->dilation[i] = from.dilation[i];
  }
  to->groups = from.groups;
}

// The enum values of the C struct are checked here: casting an out-of-range int to the C++
// enum would be meaningless.
Status ToProblem(const convt3d_problem_t* c, convt3d::Problem* p) {
  if (c == nullptr) return Invalid("problem is NULL");
  if (c->has_bias != 0 && c->has_bias != 1)
    return Invalid(Cat("has_bias=", c->has_bias, " must be 0 or 1"));
  const convt3d::DType* dtype = ValueOf(kDTypes, c->dtype);
  if (dtype == nullptr)
    return Invalid(Cat("dtype=", c->dtype,
                       " is not supported (CONVT3D_DTYPE_F32=0, CONVT3D_DTYPE_F64=1, "
                       "CONVT3D_DTYPE_BF16=2, CONVT3D_DTYPE_F16=3)"));
  CopyShape(*c, p);
  p->bias = c->has_bias == 1;
  p->dtype = *dtype;
  return Status();
}

void FromProblem(const convt3d::Problem& p, convt3d_problem_t* c) {
  CopyShape(p, c);
  c->has_bias = p.bias ? 1 : 0;
  c->dtype = CodeOf(kDTypes, p.dtype);
}

Status ToOptions(const convt3d_options_t* c, convt3d::Options* o) {
  if (c == nullptr) return Invalid("options is NULL");
  const convt3d::TunePolicy* policy = ValueOf(kPolicies, c->policy);
  if (policy == nullptr)
    return Invalid(Cat("policy=", c->policy, " is not a convt3d_policy_t (0..4)"));
  o->policy = *policy;
  // Precision applies to f32 problems only; 16-bit compute is chosen by the problem's dtype
  // (CONVT3D_DTYPE_BF16/_F16), so 3 (once reserved for BF16) stays refused like any other value.
  if (c->precision != CONVT3D_PRECISION_FP32 && c->precision != CONVT3D_PRECISION_TF32 &&
      c->precision != CONVT3D_PRECISION_FP32X3)
    return Invalid(Cat("precision=", c->precision,
                       " is not supported: CONVT3D_PRECISION_FP32 (0), _TF32 (1) or _FP32X3 (2); "
                       "for bf16/f16 set the problem's dtype to CONVT3D_DTYPE_BF16/_F16"));
  if (c->device < 0) return Invalid(Cat("device=", c->device, " must be >= 0"));
  if (c->max_candidates < 0)
    return Invalid(Cat("max_candidates=", c->max_candidates, " must be >= 0"));
  if (c->warmup < 0) return Invalid(Cat("warmup=", c->warmup, " must be >= 0"));
  if (c->repeats < 1) return Invalid(Cat("repeats=", c->repeats, " must be >= 1"));
  if (c->compile_threads < 0)
    return Invalid(Cat("compile_threads=", c->compile_threads, " must be >= 0"));
  o->cache_path = c->cache_path != nullptr ? c->cache_path : "";
  o->device = c->device;
  o->max_candidates = c->max_candidates;
  o->warmup = c->warmup;
  o->repeats = c->repeats;
  o->compile_threads = c->compile_threads;
  o->verbose = c->verbose != 0;
  o->vendor_candidates = c->vendor_candidates != 0;
  o->fp32x3_fp16 = c->fp32x3_fp16 != 0;
  return Status();
}

}  // namespace

extern "C" {

const char* convt3d_version(void) { return convt3d::Version(); }

int convt3d_abi_version(void) { return CONVT3D_C_ABI_VERSION; }

const char* convt3d_status_name(convt3d_status_t status) {
  const char* const* name = ValueOf(kStatusNames, status);
  return name != nullptr ? *name : "UNKNOWN";
}

const char* convt3d_last_error(void) { return g_last_error.c_str(); }

void convt3d_problem_init(convt3d_problem_t* problem) {
  if (problem == nullptr) return;
  FromProblem(convt3d::Problem{}, problem);
}

convt3d_status_t convt3d_validate(const convt3d_problem_t* problem) {
  return Guard([&] {
    convt3d::Problem p;
    Status s = ToProblem(problem, &p);
    return s.ok() ? convt3d::Validate(p) : s;
  });
}

convt3d_status_t convt3d_output_size(const convt3d_problem_t* problem, int64_t out[3]) {
  return Guard([&] {
    if (out == nullptr) return Invalid("out is NULL");
    convt3d::Problem p;
    Status s = ToProblem(problem, &p);
    if (s.ok()) s = convt3d::Validate(p);
    if (!s.ok()) return s;
    const convt3d::Dim3 o = p.OutSize();
    for (int i = 0; i < 3; ++i) out[i] = o[i];
    return Status();
  });
}

convt3d_status_t convt3d_problem_signature(const convt3d_problem_t* problem, char* buf,
                                           size_t buf_size, size_t* needed) {
  return Guard([&] {
    if (buf == nullptr && buf_size > 0) return Invalid("buf is NULL but buf_size > 0");
    convt3d::Problem p;
    Status s = ToProblem(problem, &p);
    if (!s.ok()) return s;
    const std::string sig = p.Signature();
    if (needed != nullptr) *needed = sig.size() + 1;
    if (buf_size > 0) {
      const size_t n = std::min(sig.size(), buf_size - 1);
      std::memcpy(buf, sig.data(), n);
      buf[n] = '\0';
    }
    return Status();
  });
}

void convt3d_options_init(convt3d_options_t* options) {
  if (options == nullptr) return;
  const convt3d::Options d;
  options->policy = CodeOf(kPolicies, d.policy);
  options->precision = CONVT3D_PRECISION_FP32;
  options->cache_path = nullptr;
  options->device = d.device;
  options->max_candidates = d.max_candidates;
  options->warmup = d.warmup;
  options->repeats = d.repeats;
  options->compile_threads = d.compile_threads;
  options->verbose = d.verbose ? 1 : 0;
  options->vendor_candidates = d.vendor_candidates ? 1 : 0;
  options->fp32x3_fp16 = d.fp32x3_fp16 ? 1 : 0;
}

convt3d_status_t convt3d_engine_create(const convt3d_options_t* options,
                                       convt3d_engine_t** engine) {
  return Guard([&] {
    if (engine == nullptr) return Invalid("engine is NULL");
    *engine = nullptr;
    convt3d::Options o;
    Status s = ToOptions(options, &o);
    if (!s.ok()) return s;
    auto created = convt3d::Engine::Create(o);
    if (!created.ok()) return created.status();
    auto handle = std::make_unique<convt3d_engine>(std::move(created).value());
    handle->precision = options->precision == CONVT3D_PRECISION_TF32 ? convt3d::Precision::kTf32
                        : options->precision == CONVT3D_PRECISION_FP32X3
                            ? convt3d::Precision::kFp32x3
                            : convt3d::Precision::kFp32;
    handle->cache_path = handle->engine.cache_path();
    handle->cache_warning = handle->engine.cache_warning();
    *engine = handle.release();
    return Status();
  });
}

void convt3d_engine_destroy(convt3d_engine_t* engine) {
  try {
    delete engine;
  } catch (...) {  // destructors release driver resources; never let that unwind into C
  }
}

const char* convt3d_engine_cache_path(const convt3d_engine_t* engine) {
  return engine != nullptr ? engine->cache_path.c_str() : "";
}

const char* convt3d_engine_cache_warning(const convt3d_engine_t* engine) {
  return engine != nullptr ? engine->cache_warning.c_str() : "";
}

int convt3d_engine_nvrtc_compiles(const convt3d_engine_t* engine) {
  return engine != nullptr ? engine->engine.nvrtc_compiles() : 0;
}

convt3d_status_t convt3d_plan_create(convt3d_engine_t* engine, const convt3d_problem_t* problem,
                                     convt3d_plan_t** plan) {
  return Guard([&] {
    if (plan == nullptr) return Invalid("plan is NULL");
    *plan = nullptr;
    if (engine == nullptr) return Invalid("engine is NULL");
    convt3d::Problem p;
    Status s = ToProblem(problem, &p);
    if (!s.ok()) return s;
    // The engine-wide precision is a contract for f32 problems; f64 is always strict and
    // bf16/f16 always accumulate in fp32 (Validate refuses any other precision for them).
    if (p.dtype == convt3d::DType::kF32) p.precision = engine->precision;
    auto made = engine->engine.Plan(p);
    if (!made.ok()) return made.status();
    *plan = new convt3d_plan(std::move(made).value());
    return Status();
  });
}

void convt3d_plan_destroy(convt3d_plan_t* plan) {
  try {
    delete plan;
  } catch (...) {
  }
}

convt3d_status_t convt3d_plan_run(const convt3d_plan_t* plan, const void* x, const void* w,
                                  const void* bias, void* y, void* stream) {
  return Guard([&] {
    if (plan == nullptr) return Invalid("plan is NULL");
    return plan->plan.Run(x, w, bias, y, static_cast<CUstream_st*>(stream));
  });
}

convt3d_status_t convt3d_plan_run_versioned(const convt3d_plan_t* plan, const void* x,
                                            const void* w, const void* bias, void* y, void* stream,
                                            uint64_t weight_version) {
  return Guard([&] {
    if (plan == nullptr) return Invalid("plan is NULL");
    return plan->plan.Run(x, w, bias, y, static_cast<CUstream_st*>(stream), weight_version);
  });
}

void convt3d_plan_problem(const convt3d_plan_t* plan, convt3d_problem_t* problem) {
  if (plan == nullptr || problem == nullptr) return;
  FromProblem(plan->plan.problem(), problem);
}

const char* convt3d_plan_kernel_name(const convt3d_plan_t* plan) {
  return plan != nullptr ? plan->plan.kernel_name().c_str() : "";
}

const char* convt3d_plan_source(const convt3d_plan_t* plan) {
  return plan != nullptr ? plan->plan.source().c_str() : "";
}

double convt3d_plan_tuned_ms(const convt3d_plan_t* plan) {
  return plan != nullptr ? plan->plan.tuned_ms() : -1;
}

double convt3d_plan_rel_err(const convt3d_plan_t* plan) {
  return plan != nullptr ? plan->plan.rel_err() : -1;
}

int convt3d_plan_origin(const convt3d_plan_t* plan, const char** name, const char** reason) {
  if (plan == nullptr) return -1;
  const convt3d::PlanOrigin& o = plan->plan.origin();
  if (name != nullptr) *name = o.name.c_str();
  if (reason != nullptr) *reason = o.reason.c_str();
  return o.tier;
}

}  // extern "C"
