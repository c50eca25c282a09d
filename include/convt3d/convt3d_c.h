/* convt3d_c.h: the C API of convt3d (what Python's ctypes and other languages bind to).
 *
 * It wraps the C++ API of convt3d.h one to one: a plain problem description, an engine that
 * owns the driver context and the SQLite cache, plans that resolve a kernel once (cache hit,
 * heuristic or tuning, per the policy) and then only launch on a given stream.
 *
 *   convt3d_problem_t p;
 *   convt3d_problem_init(&p);          // PyTorch's defaults: stride 1, padding 0, ...
 *   p.n = 8; p.c_in = 32; p.c_out = 16; p.in[0] = 16; p.in[1] = 32; p.in[2] = 32;
 *   p.kernel[0] = p.kernel[1] = p.kernel[2] = 3;
 *   convt3d_options_t o;
 *   convt3d_options_init(&o);          // tune if missing, default cache path, device 0
 *   convt3d_engine_t* e;  convt3d_plan_t* plan;
 *   if (convt3d_engine_create(&o, &e) != CONVT3D_OK) puts(convt3d_last_error());
 *   if (convt3d_plan_create(e, &p, &plan) != CONVT3D_OK) puts(convt3d_last_error());
 *   convt3d_plan_run(plan, x, w, NULL, y, stream);   // device pointers, launch only
 *   convt3d_plan_destroy(plan); convt3d_engine_destroy(e);
 *
 * Every function that can fail returns a convt3d_status_t; the reason is then available from
 * convt3d_last_error() on the same thread. No C++ exception crosses this API. Validation
 * (convt3d_validate, convt3d_output_size, convt3d_plan_create on a bad problem) works on
 * machines without a GPU; the CUDA driver and NVRTC are loaded only when first needed.
 *
 * Threads: an engine may be shared by threads (plan creation is serialised inside it); a plan's
 * run may be called from several threads, but a plan with a workspace (tensor-core, Winograd,
 * FFT and pipelined direct_tile kernels, strict fp32 kernels with a column buffer) runs on one
 * stream at a time, as in convt3d.h: create one plan per concurrent stream. A plan stays valid
 * after its engine is destroyed (it holds what it launches).
 */
#ifndef CONVT3D_CONVT3D_C_H_
#define CONVT3D_CONVT3D_C_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define CONVT3D_C_API
#else
/* Exported from libconvt3d.so even when the rest of the library is hidden. */
#define CONVT3D_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below changes layout; bindings compare it with
 * convt3d_abi_version() before touching a struct. */
#define CONVT3D_C_ABI_VERSION 3

/* Mirrors convt3d::Code. */
typedef enum convt3d_status {
  CONVT3D_OK = 0,
  CONVT3D_INVALID_ARGUMENT = 1,    /* bad problem, option or pointer: the message names it */
  CONVT3D_FAILED_PRECONDITION = 2, /* e.g. no CUDA driver or no GPU on this machine */
  CONVT3D_NOT_FOUND = 3,           /* e.g. not in the cache and the policy forbids tuning */
  CONVT3D_UNAVAILABLE = 4,         /* e.g. cache locked or unwritable */
  CONVT3D_INTERNAL = 5             /* a driver, NVRTC or SQLite call failed, or out of memory */
} convt3d_status_t;

/* Element type of x, w, bias and y (mirrors convt3d::DType). BF16 and F16 are 16-bit tensors in
 * and out, computed with fp32 accumulation; their contract is a relative L2 error <= 1e-2
 * against fp64 on the same (rounded) inputs. Their tensor-core kernel re-lays x into the plan's
 * workspace first, so x needs only its natural alignment. */
typedef enum convt3d_dtype {
  CONVT3D_DTYPE_F32 = 0,
  CONVT3D_DTYPE_F64 = 1,
  CONVT3D_DTYPE_BF16 = 2, /* bfloat16 */
  CONVT3D_DTYPE_F16 = 3   /* IEEE half */
} convt3d_dtype_t;

/* Mirrors convt3d::TunePolicy. */
typedef enum convt3d_policy {
  CONVT3D_POLICY_NEVER = 0,              /* heuristic pick; never times, never reads the cache */
  CONVT3D_POLICY_CACHE_OR_HEURISTIC = 1, /* cache hit, else the heuristic pick; never tunes */
  CONVT3D_POLICY_TUNE_IF_MISSING = 2,    /* cache hit, else tune now and store (default) */
  CONVT3D_POLICY_EXHAUSTIVE = 3,         /* always tune every candidate and store */
  CONVT3D_POLICY_BACKGROUND = 4 /* lookup tiers or heuristic at once; tunes on a worker thread */
} convt3d_policy_t;

/* Accuracy contract for the engine's f32 problems (mirrors convt3d::Precision). Relative L2 error
 * against fp64, enforced when tuning: FP32 (strict FFMA) <= 1e-6, TF32 (tensor cores) <= 1e-3,
 * FP32X3 (3xTF32 tensor cores) <= 1e-5. It applies to f32 problems only: f64 problems are always
 * strict, and 16-bit compute is selected by the tensors' dtype (CONVT3D_DTYPE_BF16/_F16, always
 * fp32 accumulation), not by a precision value. Other values (3 was once reserved for BF16) are
 * refused. */
typedef enum convt3d_precision {
  CONVT3D_PRECISION_FP32 = 0,
  CONVT3D_PRECISION_TF32 = 1,
  CONVT3D_PRECISION_FP32X3 = 2
} convt3d_precision_t;

/* nn.ConvTranspose3d with an input of shape [n, c_in, in[0], in[1], in[2]]; all triples are in
 * (D, H, W) order. Weight [c_in, c_out/groups, kD, kH, kW], bias [c_out] when has_bias. */
typedef struct convt3d_problem {
  int64_t n, c_in, c_out;
  int64_t in[3];
  int64_t kernel[3];
  int64_t stride[3];
  int64_t padding[3];
  int64_t output_padding[3];
  int64_t dilation[3];
  int64_t groups;
  int32_t has_bias; /* 0 or 1 */
  int32_t dtype;    /* a convt3d_dtype_t */
} convt3d_problem_t;

typedef struct convt3d_options {
  int32_t policy;         /* a convt3d_policy_t; default CONVT3D_POLICY_TUNE_IF_MISSING */
  int32_t precision;      /* a convt3d_precision_t for f32 plans; default CONVT3D_PRECISION_FP32 */
  const char* cache_path; /* NULL or "": $CONVT3D_CACHE, else the XDG default (see README);
                             ":memory:" keeps results for this engine only. Copied. */
  int32_t device;         /* CUDA device ordinal */
  int32_t max_candidates; /* 0: every candidate the generator offers */
  int32_t warmup;         /* benchmark protocol per candidate when tuning */
  int32_t repeats;
  int32_t compile_threads;   /* 0: one per CPU core */
  int32_t verbose;           /* nonzero: progress lines and warnings on stderr (else silent) */
  int32_t vendor_candidates; /* nonzero (default): cuDNN's algorithms compete in tuning where
                                cuDNN loads (convt3d::Options::vendor_candidates); 0: ours alone.
                                Added in ABI version 2. */
  int32_t fp32x3_fp16;       /* nonzero: fp32x3 may also run the scaled 3xFP16 tiles, cached apart
                                (convt3d::Options::fp32x3_fp16: faster; its range caveat is in
                                the README); 0 (default): only by $CONVT3D_FP32X3_FP16=1.
                                Added in ABI version 3. */
} convt3d_options_t;

typedef struct convt3d_engine convt3d_engine_t; /* opaque; owns context, compiler, cache */
typedef struct convt3d_plan convt3d_plan_t;     /* opaque; one resolved kernel */

/* ---- Library --------------------------------------------------------------------------- */
CONVT3D_C_API const char* convt3d_version(void); /* "0.1.0" */
CONVT3D_C_API int convt3d_abi_version(void);     /* CONVT3D_C_ABI_VERSION of the build */
/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" for a value outside the enum. */
CONVT3D_C_API const char* convt3d_status_name(convt3d_status_t status);
/* The message of the last failed call on this thread ("" if none). Every call that returns
 * CONVT3D_OK clears it. The pointer is valid until the next convt3d call on this thread. */
CONVT3D_C_API const char* convt3d_last_error(void);

/* ---- Problem (no GPU needed) --------------------------------------------------------------- */
/* Fills PyTorch's defaults: n = c_in = c_out = groups = 1, sizes, kernel, stride and dilation
 * 1, paddings 0, no bias, f32. */
CONVT3D_C_API void convt3d_problem_init(convt3d_problem_t* problem);
/* PyTorch's rules; on failure the message names the field and the value. */
CONVT3D_C_API convt3d_status_t convt3d_validate(const convt3d_problem_t* problem);
/* Validates, then writes the output's spatial size (D, H, W) to out[0..2]. */
CONVT3D_C_API convt3d_status_t convt3d_output_size(const convt3d_problem_t* problem,
                                                   int64_t out[3]);
/* Writes the problem's stable signature (the cache key's problem part, e.g.
 * "f32_n16_ci32_co64_i16x32x32_k3x3x3_s2x2x2_p1x1x1_op0x0x0_d2x2x2_g1_b0"; it starts with the
 * dtype: "f64_...", "bf16_...", "f16_..."), NUL-terminated and
 * truncated to buf_size, into buf. *needed (if not NULL) receives its length plus one. Does not
 * validate beyond the dtype and has_bias values. */
CONVT3D_C_API convt3d_status_t convt3d_problem_signature(const convt3d_problem_t* problem,
                                                         char* buf, size_t buf_size,
                                                         size_t* needed);

/* ---- Engine -------------------------------------------------------------------------------- */
/* Defaults of convt3d::Options plus CONVT3D_PRECISION_FP32. */
CONVT3D_C_API void convt3d_options_init(convt3d_options_t* options);
/* Creates an engine. Succeeds on a machine without a GPU (plans then fail with
 * CONVT3D_FAILED_PRECONDITION); fails when the driver works but NVRTC cannot be loaded, or on
 * a bad option. A cache that cannot be opened falls back to memory: convt3d_engine_cache_warning
 * says why (and stderr too when verbose). */
CONVT3D_C_API convt3d_status_t convt3d_engine_create(const convt3d_options_t* options,
                                                     convt3d_engine_t** engine);
CONVT3D_C_API void convt3d_engine_destroy(convt3d_engine_t* engine); /* NULL is a no-op */
/* The cache file in use (":memory:" after a fallback); owned by the engine. */
CONVT3D_C_API const char* convt3d_engine_cache_path(const convt3d_engine_t* engine);
/* Non-empty when the cache fell back to memory; owned by the engine. */
CONVT3D_C_API const char* convt3d_engine_cache_warning(const convt3d_engine_t* engine);
/* NVRTC compiles this engine has run (0 when every plan came from the cache). */
CONVT3D_C_API int convt3d_engine_nvrtc_compiles(const convt3d_engine_t* engine);

/* ---- Plan ---------------------------------------------------------------------------------- */
/* Validates, then resolves a kernel per the engine's policy: a plan this engine made before
 * for the same problem, a cache hit, the heuristic pick, or tuning (seconds to minutes, on the
 * legacy default stream, with device memory of its own). Must not run while a CUDA graph is
 * being captured. */
CONVT3D_C_API convt3d_status_t convt3d_plan_create(convt3d_engine_t* engine,
                                                   const convt3d_problem_t* problem,
                                                   convt3d_plan_t** plan);
CONVT3D_C_API void convt3d_plan_destroy(convt3d_plan_t* plan); /* NULL is a no-op */
/* Launches on `stream` (a CUstream / cudaStream_t; NULL: the legacy default stream) and
 * returns without synchronising: no lookup, no allocation (but once, outside capture, when a
 * background plan switches to a winner with a larger workspace), so it may be captured into a
 * CUDA graph. x: [n, c_in, D, H, W]; w: [c_in, c_out/groups, kD, kH, kW]; bias: [c_out], or NULL
 * when !has_bias; y: [n, c_out, Do, Ho, Wo]; all contiguous device memory of the problem's
 * dtype on the engine's device (f32 tensor-core plans read x with 16-byte copies when in[2] % 4
 * == 0: then x must be 16-byte aligned, as a fresh allocation is). Errors of
 * the kernel itself surface at the next sync. */
CONVT3D_C_API convt3d_status_t convt3d_plan_run(const convt3d_plan_t* plan, const void* x,
                                                const void* w, const void* bias, void* y,
                                                void* stream);
/* convt3d_plan_run, except that plans which re-lay the weights into their workspace (tensor-core,
 * Winograd, FFT and pipelined direct_tile kernels) do so only when (w, weight_version) differs from
 * the last run's; else the packed copy from that run is used. The caller promises that the same w
 * with the same version holds the same values: bump the version whenever the weights change in
 * place (breaking that promise is undefined: old weights may be used). convt3d_plan_run (no
 * version) packs on every run. Packing always happens while `stream` is being captured into a CUDA
 * graph, and a plan captured once packs on every run from then on. */
CONVT3D_C_API convt3d_status_t convt3d_plan_run_versioned(const convt3d_plan_t* plan, const void* x,
                                                          const void* w, const void* bias, void* y,
                                                          void* stream, uint64_t weight_version);
/* The plan's problem, kernel name (e.g. "direct_phase_f32_x64y2_o2_c4"), origin ("cache",
 * "tuned" or "heuristic"), the winner's median ms when tuned or cached (else -1) and its
 * relative L2 error against the fp64 reference (else -1). Strings are owned by the plan. */
CONVT3D_C_API void convt3d_plan_problem(const convt3d_plan_t* plan, convt3d_problem_t* problem);
CONVT3D_C_API const char* convt3d_plan_kernel_name(const convt3d_plan_t* plan);
CONVT3D_C_API const char* convt3d_plan_source(const convt3d_plan_t* plan);
CONVT3D_C_API double convt3d_plan_tuned_ms(const convt3d_plan_t* plan);
CONVT3D_C_API double convt3d_plan_rel_err(const convt3d_plan_t* plan);
/* Which lookup tier served the plan (convt3d::PlanOrigin): returns the tier (0 tuned, 1 exact,
 * 2 same_gpu, 3 same_arch, 4 nearest, 5 heuristic; -1 for a NULL plan) and, where not NULL,
 * sets *name and *reason (why the better tiers missed) to strings owned by the plan, valid until
 * its next run or destroy. A CONVT3D_POLICY_BACKGROUND plan switches to the tuned winner at a
 * run after it is stored; kernel name, source and origin then follow it. */
CONVT3D_C_API int convt3d_plan_origin(const convt3d_plan_t* plan, const char** name,
                                      const char** reason);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CONVT3D_CONVT3D_C_H_ */
