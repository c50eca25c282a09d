// test_gpu.cpp: every kernel candidate against the fp64 CPU reference on a GPU (skips without one).
//
// Inputs are fresh random values (never zeros); the output buffer is poisoned with NaN bytes
// before each launch so that an element a kernel forgets to write fails the check.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "base/status.h"
#include "cache/cache.h"
#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/families/direct_tile.h"
#include "generator/families/fft.h"
#include "generator/families/igemm_shape.h"
#include "generator/families/winograd.h"
#include "generator/source.h"
#include "runtime/runtime.h"
#include "src/candidate.h"
#include "src/problem_io.h"
#include "src/reference.h"
#include "src/tuner.h"
#include "src/vendor.h"
#include "tests/status_matchers.h"
#include "tests/test_util.h"

namespace convt3d {
namespace {

using test::SetMode;
using test::StatusIs;
using ::testing::HasSubstr;

// Returns "" when a GPU is usable, else the reason. The device is probed once and its primary
// context stays current for the whole test binary (tests launch kernels directly).
const std::string& NoGpuReason() {
  static std::shared_ptr<rt::Context> context;
  static const std::string reason = [] {
    auto ctx = rt::Context::Create(0);
    if (!ctx.ok()) return ctx.status().message();
    context = ctx.value();
    return std::string();
  }();
  if (context) (void)context->Activate();
  return reason;
}

#define REQUIRE_GPU() \
  if (!NoGpuReason().empty()) GTEST_SKIP() << "no GPU: " << NoGpuReason()

struct Data {
  std::vector<double> x, w, b;  // values as the kernel sees them (rounded to its dtype)
  std::vector<double> ref;
};

Data MakeData(const Problem& p, uint64_t seed) {
  Data d;
  d.x.resize(p.InputElements());
  d.w.resize(p.WeightElements());
  d.b.resize(p.c_out);
  ref::FillRandom(d.x, seed);
  ref::FillRandom(d.w, seed + 1);
  ref::FillRandom(d.b, seed + 2);
  for (auto* v : {&d.x, &d.w, &d.b})
    for (double& e : *v) e = ref::RoundTo(p.dtype, e);
  d.ref = ref::ForwardGather(p, d.x.data(), d.w.data(), p.bias ? d.b.data() : nullptr);
  return d;
}

// Device copies of the data in the problem's dtype. The weights and the output start `pad`
// elements into their buffers (0: at the buffers' 256-byte aligned start).
struct DeviceData {
  rt::DeviceBuffer x, w, b, y;
  size_t pad_bytes = 0;
  void* w_at() const { return static_cast<char*>(w.get()) + pad_bytes; }
  void* y_at() const { return static_cast<char*>(y.get()) + pad_bytes; }
};

StatusOr<DeviceData> Upload(const Problem& p, const Data& d, size_t pad = 0) {
  DeviceData dd;
  const size_t eb = DTypeBytes(p.dtype);
  dd.pad_bytes = pad * eb;
  auto up = [&](rt::DeviceBuffer& buf, const std::vector<double>& v, size_t lead) -> Status {
    std::vector<double> padded(lead + v.size(), 0.0);
    std::copy(v.begin(), v.end(), padded.begin() + static_cast<std::ptrdiff_t>(lead));
    auto b = rt::DeviceBuffer::Alloc(std::max<size_t>(padded.size(), 1) * eb);
    if (!b.ok()) return b.status();
    buf = std::move(b).value();
    const auto bytes = ref::Narrow(p.dtype, padded);
    return buf.Upload(bytes.data(), bytes.size());
  };
  CONVT3D_RETURN_IF_ERROR(up(dd.x, d.x, 0));
  CONVT3D_RETURN_IF_ERROR(up(dd.w, d.w, pad));
  CONVT3D_RETURN_IF_ERROR(up(dd.b, d.b, 0));
  auto y = rt::DeviceBuffer::Alloc((p.OutputElements() + pad) * eb);
  if (!y.ok()) return y.status();
  dd.y = std::move(y).value();
  return dd;
}

// The output of dd against d.ref, whatever the dtype.
StatusOr<ref::ErrorStats> CompareOutput(const Problem& p, const DeviceData& dd, const Data& d) {
  std::vector<unsigned char> bytes(dd.pad_bytes + p.OutputElements() * DTypeBytes(p.dtype));
  CONVT3D_RETURN_IF_ERROR(dd.y.Download(bytes.data(), bytes.size()));
  const auto y = ref::Widen(p.dtype, bytes.data() + dd.pad_bytes, p.OutputElements());
  return ref::Compare(y.data(), d.ref);
}

// How Check launches a candidate besides its plan: persistent steps (LaunchStep::blocks_per_sm)
// on at most max_blocks blocks (0: as planned), so that blocks walk several work items; the
// weights and output one element past their buffers' alignment (misalign).
struct CheckOptions {
  unsigned max_blocks = 0;
  bool misalign = false;
};

// Launches one compiled candidate (with its weight re-layout, if any) on poisoned output and
// returns its error against d.ref.
StatusOr<ref::ErrorStats> Check(const Problem& p, const gen::Config& c,
                                const std::vector<char>& cubin, const Data& d,
                                const CheckOptions& o = {}) {
  CONVT3D_ASSIGN_OR_RETURN(auto k, CandidateKernels::Load(p, c, cubin, c.Name()));
  for (gen::LaunchStep& step : k.plan.steps)
    if (o.max_blocks > 0 && step.blocks_per_sm > 0)
      step.grid[0] = std::min(step.grid[0], o.max_blocks);
  auto dd = Upload(p, d, o.misalign ? 1 : 0);
  if (!dd.ok()) return dd.status();
  rt::DeviceBuffer ws;
  if (k.workspace_bytes() > 0) {
    CONVT3D_ASSIGN_OR_RETURN(ws, rt::DeviceBuffer::Alloc(k.workspace_bytes()));
    CONVT3D_RETURN_IF_ERROR(ws.FillBytes(0xFF));  // the prep kernel must write every word
  }
  CONVT3D_RETURN_IF_ERROR(dd->y.FillBytes(0xFF));
  CONVT3D_RETURN_IF_ERROR(
      k.Launch(dd->x.get(), dd->w_at(), dd->b.get(), dd->y_at(), ws.get(), nullptr));
  CONVT3D_RETURN_IF_ERROR(rt::Synchronize());
  return CompareOutput(p, *dd, d);
}

// Compiles `configs` for `p` in parallel and checks each; returns how many were checked.
int CheckAll(const Problem& p, const std::vector<gen::Config>& configs, uint64_t seed,
             const CheckOptions& options = {}) {
  const std::string arch = rt::QueryDevice(0)->arch();
  std::vector<rt::CompileRequest> reqs;
  for (const auto& c : configs) {
    auto src = gen::BuildSource(p, c);
    EXPECT_OK(src) << c.Name();
    reqs.push_back(
        {c.Name(), src.ok() ? src.value() : "", gen::CompileArch(c, arch), {c.Name()}, {}});
  }
  const auto compiled = rt::CompileAll(reqs, 0);
  const Data d = MakeData(p, seed);
  int checked = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    const std::string where = p.Signature() + " " + configs[i].Name();
    EXPECT_OK(compiled[i].status) << where;
    if (!compiled[i].status.ok()) continue;
    auto err = Check(p, configs[i], compiled[i].cubin, d, options);
    EXPECT_OK(err) << where;
    if (!err.ok()) continue;
    EXPECT_EQ(err->nonfinite, 0) << where << ": unwritten or non-finite outputs";
    EXPECT_LE(err->rel_l2, ToleranceOf(p))
        << where << ": rel_l2 " << err->rel_l2 << " max_abs " << err->max_abs;
    ++checked;
  }
  return checked;
}

// The candidates of p that `keep` takes, in the generator's order.
std::vector<gen::Config> CandidatesWhere(const Problem& p,
                                         const std::function<bool(const gen::Config&)>& keep,
                                         const gen::DeviceLimits& limits = {}) {
  std::vector<gen::Config> kept;
  for (const auto& c : gen::Candidates(p, limits))
    if (keep(c)) kept.push_back(c);
  return kept;
}

bool IsMma(const gen::Config& c) { return c.family == "igemm_mma"; }

// Three of `v` that rotate with the seed: the first, v[seed] and v[a * seed + b] (cyclically), so
// that a suite of seeds covers the whole list.
std::vector<gen::Config> ThreeOf(const std::vector<gen::Config>& v, int seed, int a, int b) {
  return {v[0], v[seed % v.size()], v[(a * seed + b) % v.size()]};
}

// ---- The seven level-1 configurations, scaled down, every candidate --------------------------
class Level1 : public ::testing::TestWithParam<int> {};

// Level-1 problem i with batch 2 and its volume capped at 5 x max_h x max_w, so the CPU reference
// stays fast (odd sizes keep partial tiles in play); kernel, stride, padding, dilation, groups and
// channels as in the file.
Problem ScaledLevel1(int i, int64_t max_h, int64_t max_w) {
  auto all = io::LoadProblems(test::kLevel1File);
  EXPECT_OK(all);
  Problem p = all.ok() ? all->at(i).problem : Problem();
  p.n = 2;
  p.in = {std::min<int64_t>(p.in[0], 5), std::min<int64_t>(p.in[1], max_h),
          std::min<int64_t>(p.in[2], max_w)};
  return p;
}

TEST_P(Level1, EveryCandidateMatchesReference) {
  REQUIRE_GPU();
  Problem p = ScaledLevel1(GetParam(), 7, 37);
  p.bias = GetParam() % 2 == 0;  // the level-1 problems have no bias; cover both paths
  const auto configs = gen::Candidates(p);
  EXPECT_EQ(CheckAll(p, configs, 1000 + GetParam()), static_cast<int>(configs.size()));
  Problem p64 = p;
  p64.dtype = DType::kF64;
  gen::Config ref;  // the engine's fp64 reference configuration
  ref.dtype = DType::kF64;
  ref.bx = 64;
  ref.by = 2;
  EXPECT_EQ(CheckAll(p64, {ref, gen::HeuristicPick(p64)}, 2000 + GetParam()), 2);
}

INSTANTIATE_TEST_SUITE_P(Gpu, Level1, ::testing::Range(0, 7));

// The level-1 problem and mode (see SetMode) of `param` scaled to 5 x 9 x max_w, with a bias when
// the problem's index has the given parity: every candidate, of which at least four must be of
// the mma family, on data from seed + index.
void CheckLevel1WithMma(std::tuple<int, int> param, int64_t max_w, int bias_parity, uint64_t seed) {
  REQUIRE_GPU();
  const auto [i, mode] = param;
  Problem p = ScaledLevel1(i, 9, max_w);
  SetMode(p, mode);
  p.bias = i % 2 == bias_parity;
  seed += i;
  const auto configs = gen::Candidates(p);
  const auto mma = std::count_if(configs.begin(), configs.end(), IsMma);
  EXPECT_GE(mma, 4) << p.Signature() << ": the tensor-core family should apply";
  EXPECT_EQ(CheckAll(p, configs, seed), static_cast<int>(configs.size()));
}

// The same seven configurations in the tensor-core precisions: every candidate (the mma family
// plus the strict fallbacks) within the precision's contract.
class Level1TensorCore : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Level1TensorCore, EveryCandidateMeetsItsContract) {
  CheckLevel1WithMma(GetParam(), 45, 1, 3000);
}

INSTANTIATE_TEST_SUITE_P(Gpu, Level1TensorCore,  // tf32, fp32x3
                         ::testing::Combine(::testing::Range(0, 7), ::testing::Values(1, 2)));

// ---- 200+ random small configurations covering every parameter ----------------------------
Problem RandomProblem(int seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  while (true) {
    Problem p;
    p.n = pick(1, 3);
    p.groups = pick(1, 4) == 4 ? pick(2, 4) : 1;
    p.c_in = p.groups * pick(1, 6);
    p.c_out = p.groups * pick(1, 9);
    for (int i = 0; i < 3; ++i) {
      p.in[i] = pick(1, 7);
      p.kernel[i] = pick(1, 5);
      p.stride[i] = pick(1, 4);
      p.dilation[i] = pick(1, 3);
      p.padding[i] = pick(0, static_cast<int>(p.dilation[i] * (p.kernel[i] - 1)) + 1);
      p.output_padding[i] = pick(0, static_cast<int>(std::max(p.stride[i], p.dilation[i])) - 1);
    }
    p.bias = pick(0, 1) == 1;
    if (Validate(p).ok()) return p;
  }
}

class RandomConfig : public ::testing::TestWithParam<int> {};

TEST_P(RandomConfig, CandidatesMatchReference) {
  REQUIRE_GPU();
  const Problem p = RandomProblem(GetParam());
  auto all = gen::Candidates(p);
  ASSERT_FALSE(all.empty());
  // The heuristic pick plus two others that rotate with the seed, so the suite as a whole
  // covers every block shape, outputs-per-thread and channels-per-thread value.
  EXPECT_EQ(CheckAll(p, ThreeOf(all, GetParam(), 7, 3), 5000 + GetParam()), 3) << p.Signature();
  Problem p64 = p;
  p64.dtype = DType::kF64;
  EXPECT_EQ(CheckAll(p64, {gen::HeuristicPick(p64)}, 6000 + GetParam()), 1) << p.Signature();
}

INSTANTIATE_TEST_SUITE_P(Gpu, RandomConfig, ::testing::Range(0, 220));

// RandomProblem(base + seed), and for every third seed wide channel groups (several K chunks,
// several N tiles, channel counts that are not multiples of 8 or of 2) with a batch of one and
// smaller volumes where still valid, to keep the CPU reference fast.
Problem RandomTensorProblem(int base, int seed) {
  Problem p = RandomProblem(base + seed);
  if (seed % 3 == 0) {
    std::mt19937 rng(seed);
    p.c_in = p.groups * (1 + static_cast<int>(rng() % 40));
    p.c_out = p.groups * (1 + static_cast<int>(rng() % 150));
    p.n = 1;
    Problem smaller = p;  // smaller volumes keep the CPU reference fast, where still valid
    for (int d = 0; d < 3; ++d) smaller.in[d] = std::min<int64_t>(p.in[d], 5);
    if (Validate(smaller).ok()) p = smaller;
  }
  return p;
}

// RandomTensorProblem(base, seed) in mode `even` or `odd` (see SetMode) by the seed's parity,
// which must be valid: three of its mma candidates that rotate with the seed, and the first of
// its other candidates too when `with_other` or when the mma family does not apply (a halo too
// big for shared memory, from long dilated kernels: the strict kernels serve it); on data from
// data_seed + seed.
void CheckRandomTensor(int base, int seed, int even, int odd, bool with_other, uint64_t data_seed) {
  REQUIRE_GPU();
  Problem p = RandomTensorProblem(base, seed);
  SetMode(p, seed % 2 == 0 ? even : odd);
  ASSERT_OK(Validate(p)) << p.Signature();
  const std::vector<gen::Config> mma = CandidatesWhere(p, IsMma);
  const std::vector<gen::Config> others =
      CandidatesWhere(p, [](const gen::Config& c) { return !IsMma(c); });
  std::vector<gen::Config> some;
  if (with_other || mma.empty()) {
    ASSERT_FALSE(others.empty()) << p.Signature();
    some.push_back(others.front());
  }
  if (!mma.empty())
    for (const gen::Config& c : ThreeOf(mma, seed, 5, 1)) some.push_back(c);
  EXPECT_EQ(CheckAll(p, some, data_seed + seed), static_cast<int>(some.size())) << p.Signature();
}

// Random configurations for the tensor-core family, alternating TF32 and 3xTF32. Every third one
// has wide channel groups (several K chunks, several N tiles, channels that are not multiples
// of 8), the rest the small ones above (mostly zero-padded fragments).
class RandomTensorCore : public ::testing::TestWithParam<int> {};

TEST_P(RandomTensorCore, MmaCandidatesMeetTheirContract) {
  CheckRandomTensor(10000, GetParam(), 1, 2, false, 7000);  // tf32, fp32x3
}

INSTANTIATE_TEST_SUITE_P(Gpu, RandomTensorCore, ::testing::Range(0, 150));

// The seven level-1 configurations with 16-bit tensors (bf16 and f16 in and out, fp32
// accumulation): every candidate, the mma family included, within 1e-2 of fp64.
class Level1Half : public ::testing::TestWithParam<std::tuple<int, int>> {};

// Width 46: 4-byte halo copies; L1-77 keeps 32: 16-byte.
TEST_P(Level1Half, EveryCandidateMeetsItsContract) { CheckLevel1WithMma(GetParam(), 46, 0, 8000); }

INSTANTIATE_TEST_SUITE_P(Gpu, Level1Half,  // bf16, f16
                         ::testing::Combine(::testing::Range(0, 7), ::testing::Values(3, 4)));

// Random configurations with 16-bit tensors, alternating bf16 and f16: three mma candidates
// (where the halo fits in shared memory) plus the first direct candidate. Every third one has
// wide channel groups (odd channel counts leave a half-empty channel pair).
class RandomHalf : public ::testing::TestWithParam<int> {};

TEST_P(RandomHalf, CandidatesMeetTheirContract) {
  CheckRandomTensor(20000, GetParam(), 3, 4, true, 9000);  // bf16, f16
}

INSTANTIATE_TEST_SUITE_P(Gpu, RandomHalf, ::testing::Range(0, 120));

// Random stride-1 configurations for the wgmma family, cycling TF32, 3xTF32, BF16 and FP16:
// every wgmma candidate (the family applies to stride 1 only, so the random suites above rarely
// reach it). Every third one has wide channel groups (several chunks, N up to 152, channel
// counts that leave a 16-byte unit part empty); kernels up to 5 with dilation and padding give
// halos with every kind of border.
class RandomWgmma : public ::testing::TestWithParam<int> {};

TEST_P(RandomWgmma, CandidatesMeetTheirContract) {
  const int seed = GetParam();
  Problem p = RandomTensorProblem(30000, seed);
  p.stride = {1, 1, 1};
  for (int i = 0; i < 3; ++i) {  // output_padding < max(stride, dilation) at stride 1
    p.output_padding[i] = std::min<int64_t>(p.output_padding[i], p.dilation[i] - 1);
    // Keep at least one output: D_out = D_in - 2*padding + dilation*(k-1) + output_padding.
    const int64_t room = p.in[i] - 1 + p.dilation[i] * (p.kernel[i] - 1) + p.output_padding[i];
    p.padding[i] = std::min<int64_t>(p.padding[i], room / 2);
  }
  SetMode(p, seed % 4 + 1);  // tf32, fp32x3, bf16, f16
  ASSERT_OK(Validate(p)) << p.Signature();
  const std::vector<gen::Config> wg =
      CandidatesWhere(p, [](const gen::Config& c) { return c.family == "igemm_wgmma"; });
  if (wg.empty()) {
    // Only a halo too big for shared memory (long dilated kernels) leaves the family out: the
    // smallest tile, one m64 tile with one K step per chunk, must then not fit either.
    gen::Config c;
    c.family = "igemm_wgmma";
    c.dtype = p.dtype;
    c.bqd = 1, c.bqh = 8, c.bqw = 8, c.wg = 1, c.mt = 1;
    c.bn = static_cast<int>((p.c_out / p.groups + 7) / 8 * 8);
    c.ck = p.dtype == DType::kF32 ? 8 : 16;
    c.split = p.precision == Precision::kFp32x3 ? 3 : 1;
    EXPECT_GT(gen::IgemmShapeOf(p, c).smem_bytes, 113 * 1024) << p.Signature();
    return;
  }
  REQUIRE_GPU();  // the problem and its candidates above are checked without one
  EXPECT_EQ(CheckAll(p, wg, 11000 + seed), static_cast<int>(wg.size())) << p.Signature();
}

INSTANTIATE_TEST_SUITE_P(Gpu, RandomWgmma, ::testing::Range(0, 80));

// ---- Random problems for each kernel family ----------------------------------------------
// The draws of the random-family suites from one seed: Pick takes one of the values (repeats
// weigh it), Below(n) one of 0 .. n-1.
class Draws {
 public:
  explicit Draws(uint32_t seed) : rng_(seed) {}
  int Pick(std::initializer_list<int> v) { return *(v.begin() + rng_() % v.size()); }
  int64_t Below(int64_t n) { return static_cast<int64_t>(rng_() % n); }

  // A problem with groups, channels per group and batch picked from the lists, then dim(p, i) for
  // each dimension i (which draws that dimension's fields), then a coin for the bias: in that
  // order, which fixes the problem each seed gives.
  Problem NewProblem(std::initializer_list<int> groups, std::initializer_list<int> c_in,
                     std::initializer_list<int> c_out, std::initializer_list<int> n,
                     const std::function<void(Problem&, int)>& dim) {
    Problem p;
    p.groups = Pick(groups);
    p.c_in = p.groups * Pick(c_in);
    p.c_out = p.groups * Pick(c_out);
    p.n = Pick(n);
    for (int i = 0; i < 3; ++i) dim(p, i);
    p.bias = Below(2);
    return p;
  }

 private:
  std::mt19937 rng_;
};

// Whether a drawn problem is too large for a suite (more than 3e7 products: its fp64 reference
// on the CPU would dominate the run); such draws are invalid and redrawn.
bool TooManyProducts(const Problem& p) {
  return static_cast<double>(p.n) * p.c_in * (p.c_out / p.groups) * p.in[0] * p.in[1] * p.in[2] *
             p.kernel[0] * p.kernel[1] * p.kernel[2] >
         3e7;
}

// One random-family suite, for seeds 0, 1, ...: draws problems (draw(r, seed, 0), draw(r, seed,
// 1), ..., with r seeded draw_seed + seed) until one is valid and has candidates `keep` takes,
// then, with a GPU, checks every one of those against the reference on data from check_seed +
// seed. The draws need no GPU, so a broken generator fails here too. `extend`, if given, may add
// variants of the kept candidates (with their own checks) first. `fp16_split`: the draws' lists
// include the opt-in 3xFP16 tiles (gen::DeviceLimits::fp16_split).
struct FamilySuite {
  uint32_t draw_seed;
  uint64_t check_seed;
  int max_draws;
  Problem (*draw)(Draws& r, int seed, int draw);
  bool (*keep)(const gen::Config& c);
  void (*extend)(const Problem& p, std::vector<gen::Config>& kept, int seed) = nullptr;
  bool fp16_split = false;
};

// The suite's problem of `seed` and the candidates of it that the suite keeps.
void DrawFamilyProblem(const FamilySuite& suite, int seed, Problem& p,
                       std::vector<gen::Config>& kept) {
  Draws r(suite.draw_seed + seed);
  kept.clear();
  for (int i = 0; kept.empty(); ++i) {
    ASSERT_LT(i, suite.max_draws) << "no problem drawn that the candidates take";
    p = suite.draw(r, seed, i);
    gen::DeviceLimits limits;
    limits.fp16_split = suite.fp16_split;
    if (Validate(p).ok()) kept = CandidatesWhere(p, suite.keep, limits);
  }
}

// Calls `visit` with the problem and kept candidates of each of `seeds` draws of `suite` (the
// draw tests check, without a GPU, that a suite reaches the paths its comment promises).
template <typename Visit>
void ForEachDraw(const FamilySuite& suite, int seeds, Visit visit) {
  for (int seed = 0; seed < seeds; ++seed) {
    Problem p;
    std::vector<gen::Config> kept;
    ASSERT_NO_FATAL_FAILURE(DrawFamilyProblem(suite, seed, p, kept));
    visit(p, kept);
  }
}

void CheckFamily(const FamilySuite& suite, int seed) {
  Problem p;
  std::vector<gen::Config> kept;
  ASSERT_NO_FATAL_FAILURE(DrawFamilyProblem(suite, seed, p, kept));
  if (suite.extend) {
    ASSERT_NO_FATAL_FAILURE(suite.extend(p, kept, seed));
  }
  REQUIRE_GPU();
  EXPECT_EQ(CheckAll(p, kept, suite.check_seed + seed), static_cast<int>(kept.size()))
      << p.Signature();
}

// Defines the suite `name`: CheckFamily(FamilySuite{...}, seed) for seeds 0 .. seeds - 1.
#define FAMILY_SUITE(name, seeds, ...)                                                          \
  class name : public ::testing::TestWithParam<int> {};                                         \
  TEST_P(name, CandidatesMatchReference) { CheckFamily(FamilySuite{__VA_ARGS__}, GetParam()); } \
  INSTANTIATE_TEST_SUITE_P(Gpu, name, ::testing::Range(0, seeds))

// direct_tile, cycling strict fp32 (twice), bf16 and f16: every direct_tile candidate. Every
// third one has wider channel groups (several input-channel chunks with two-level sums, blocks
// of 16 channels) on smaller volumes. Problems the family does not take (more than 1024 products
// per output, or windows too long) are redrawn, so that each seed checks candidates.
Problem DirectTileProblem(Draws&, int seed, int draw) {
  Problem p = RandomTensorProblem(40000 + 1000 * draw, seed);
  if (seed % 3 == 0) p.c_out = p.groups * (1 + (seed * 7 + draw) % 64);
  if (seed % 4 >= 2) SetMode(p, seed % 4 + 1);  // bf16, f16
  return p;
}
bool IsDirectTile(const gen::Config& c) { return c.family == "direct_tile"; }
FAMILY_SUITE(RandomDirectTile, 80, 0, 12000, 100, DirectTileProblem, IsDirectTile);

// The tensor-core variant of direct_tile (all-phases blocks, mma.sync from the staged tiles):
// random problems it takes (kernel a multiple of the stride, dilation 1, a multiple of 4 input
// and of 8 output channels per group), tf32 and fp32x3 in turn, with groups, bias, output
// padding, and extents that are not multiples of the block or of the W stride (tails, scalar
// stores). Every mma candidate of each problem.
Problem DirectTileMmaProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem({1, 1, 2}, {4, 8, 12}, {8, 16}, {1, 2}, [&](Problem& q, int i) {
    q.stride[i] = i == 2 ? r.Pick({1, 2, 4}) : r.Pick({1, 2, 3});
    q.kernel[i] = q.stride[i] * r.Pick({1, 2});
    q.padding[i] = r.Below(q.kernel[i]);
    q.output_padding[i] = r.Below(q.stride[i]);
    q.in[i] = r.Pick({3, 5, 8, 11});
  });
  SetMode(p, seed % 2 ? 2 : 1);  // fp32x3, tf32
  return p;
}
bool IsDirectTileMma(const gen::Config& c) { return IsDirectTile(c) && c.mma; }
FAMILY_SUITE(RandomDirectTileMma, 24, 5000, 13000, 500, DirectTileMmaProblem, IsDirectTileMma);

// The pipelined variant of direct_tile (packed weights, chunks double-buffered by cp.async): f32
// problems, some summing over 256 products per output (runs of chunks), strides 1-3, kernels 1-5,
// dilation, padding that crops, output_padding, groups, bias, odd extents (W rows the 16-byte
// copies cannot take, halo columns past the input) and 4-32 input channels per group (2-8
// chunks; every eighth seed 12 channels to 3, odd kernels: chunks of 6 channels whose weights
// are copied element-wise); strict fp32, then tf32 and fp32x3 (FFMA in every mode). Every _cp
// candidate.
Problem DirectTileCpProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem({1, 1, 2}, {4, 8, 12, 16, 32}, {1, 3, 8, 16, 32}, {1, 2},
                           [&](Problem& q, int i) {
                             q.stride[i] = r.Pick({1, 2, 2, 3});
                             q.kernel[i] = r.Pick({1, 2, 3, 3, 4, 5});
                             q.dilation[i] = r.Pick({1, 1, 2});
                             q.padding[i] = r.Below(q.dilation[i] * (q.kernel[i] - 1) + 2);
                             q.output_padding[i] = r.Below(std::max(q.stride[i], q.dilation[i]));
                             q.in[i] = r.Pick({2, 5, 8, 13, i == 2 ? 32 : 9});
                           });
  SetMode(p, seed % 4 == 3 ? 2 : seed % 4 == 2 ? 1 : 0);  // fp32 twice, tf32, fp32x3
  if (seed % 8 == 5) {
    p.c_in = p.groups * 12, p.c_out = p.groups * 3;
    for (int i = 0; i < 3; ++i) p.kernel[i] = p.kernel[i] / 2 * 2 + 1, p.dilation[i] = 1;
  }
  if (TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
bool IsDirectTileCp(const gen::Config& c) { return IsDirectTile(c) && c.cp; }
FAMILY_SUITE(RandomDirectTileCp, 32, 7300, 15000, 500, DirectTileCpProblem, IsDirectTileCp);

// winograd: random stride-1 problems it takes (kernel 1-3 per dimension with at least 8 taps,
// dilation 1), with groups, bias, padding (up to k + 1, which crops), odd extents (tiles past the
// output) and channel counts that leave a partial last stage; strict fp32 (every fourth seed
// fp32x3, whose list also holds them). Every winograd candidate of each problem.
Problem WinogradProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem({1, 1, 2, 3}, {1, 3, 4, 8, 13}, {4, 6, 8, 12, 16, 20}, {1, 2},
                           [&](Problem& q, int i) {
                             q.kernel[i] = r.Pick({1, 2, 3, 3});
                             q.padding[i] = r.Below(q.kernel[i] + 2);  // past k - 1: cropping
                             q.in[i] = r.Pick({1, 3, 4, 7, 10});
                           });
  if (seed % 4 == 3) SetMode(p, 2);  // fp32x3
  return p;
}
bool IsWinograd(const gen::Config& c) { return c.family == "winograd"; }
FAMILY_SUITE(RandomWinograd, 40, 6000, 14000, 500, WinogradProblem, IsWinograd);

// winograd on strided problems: every phase the same taps (kernel = stride x 1-3 per dimension,
// W strided in the first 24 draws, then unstrided beside a strided H or D), at least 8 taps per
// phase, with padding (cropping past the kernel too), output_padding (phases of unequal
// extents), groups, bias, odd extents and deep channels (point sums in runs of stages); strict
// fp32 (the only mode that takes strided problems). Every winograd candidate of each problem.
Problem WinogradStridedProblem(Draws& r, int seed, int) {
  Problem p =
      r.NewProblem({1, 1, 2}, {1, 3, 4, 8, 13}, {4, 6, 8, 12, 16}, {1, 2}, [&](Problem& q, int i) {
        // Seeds 24 on: W unstrided, H (or D) strided: the epilogue's paired W stores.
        const bool flat_w = seed >= 24;
        if (i == 2)
          q.stride[i] = flat_w ? 1 : r.Pick({2, 2, 3});
        else if (i == 1 && flat_w && q.stride[0] == 1)
          q.stride[i] = r.Pick({2, 3});
        else
          q.stride[i] = r.Pick({1, 2, 2, 3});
        q.kernel[i] = q.stride[i] * r.Pick({1, 2, 2, 3});
        q.padding[i] = r.Below(q.kernel[i] + 1);
        q.output_padding[i] = r.Below(q.stride[i]);
        q.in[i] = r.Pick({1, 2, 3, 5, 7});
      });
  // Every third seed deep channels: past 128 per group the point sums go in runs of stages.
  if (seed % 3 == 1) p.c_in = p.groups * r.Pick({130, 200});
  return p;
}
FAMILY_SUITE(RandomWinogradStrided, 30, 6700, 14700, 500, WinogradStridedProblem, IsWinograd);

// lattice candidates (generator/lattice.h): random stride == dilation problems (1-3 per
// dimension, at least one above 1), with groups, bias, padding (cropping included) and
// output_padding, in every precision mode and 16-bit type; every lattice candidate of each. The
// NaN-poisoned output shows any output that neither the fill nor the lattice kernel wrote.
Problem LatticeProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem({1, 1, 2}, {2, 4, 8, 12}, {8, 16, 24}, {1, 2}, [&](Problem& q, int i) {
    q.stride[i] = q.dilation[i] = r.Pick({1, 2, 2, 3});
    q.kernel[i] = r.Pick({1, 2, 3, 3});
    q.padding[i] = r.Below(q.dilation[i] * (q.kernel[i] - 1) + 2);
    q.output_padding[i] = r.Below(3) == 0 ? r.Below(q.stride[i]) : 0;
    q.in[i] = r.Pick({2, 3, 5, 8, 11});
  });
  SetMode(p, seed % 5);
  return p;
}
bool IsLattice(const gen::Config& c) { return c.lattice == 1; }
FAMILY_SUITE(RandomLattice, 40, 7000, 15000, 500, LatticeProblem, IsLattice);

// subpixel candidates (generator/lattice.h, phase channels): random strided problems (stride
// and dilation independent, 1-3 per dimension), groups, bias, cropping padding and
// output_padding, in the tensor-core modes and 16-bit types; every subpixel candidate of each.
Problem SubpixelProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem({1, 1, 2}, {4, 8, 12, 16}, {2, 4, 8}, {1, 2}, [&](Problem& q, int i) {
    q.stride[i] = r.Pick({1, 2, 2, 3});
    q.dilation[i] = r.Pick({1, 1, 2});
    q.kernel[i] = r.Pick({1, 2, 3, 4});
    q.padding[i] = r.Below(q.dilation[i] * (q.kernel[i] - 1) + 2);
    q.output_padding[i] = r.Below(3) == 0 ? r.Below(std::max(q.stride[i], q.dilation[i])) : 0;
    q.in[i] = r.Pick({2, 3, 5, 8, 11});
  });
  SetMode(p, seed % 4 + 1);  // tf32, fp32x3, bf16, f16
  return p;
}
bool IsSubpixel(const gen::Config& c) { return c.lattice == 2; }
FAMILY_SUITE(RandomSubpixel, 40, 8000, 16000, 500, SubpixelProblem, IsSubpixel);

// gemm_wgmma (templates/gemm_wgmma.cu): random problems of any stride 1-4, kernel 1-7, dilation
// 1-3, with groups, bias, cropping padding, output_padding and odd extents; channel counts from
// 1 to 72 in and 1 to 136 out per group (partial K stages, several K stages and several channel
// tiles, phase-channel sub-problems past 256 channels); tf32, fp32x3, bf16 and f16 in turn. Every
// gemm_wgmma candidate of each problem, plain and phase-channel. Problems whose CPU reference
// would take more than ~3e7 products are redrawn.
Problem GemmWgmmaProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem(
      {1, 1, 2, 3}, {1, 3, 8, 16, 40, 72}, {1, 5, 8, 24, 40, 136}, {1, 2}, [&](Problem& q, int i) {
        q.stride[i] = r.Pick({1, 2, 3, 4});
        q.kernel[i] = r.Pick({1, 2, 3, 4, 5, 7});
        q.dilation[i] = r.Pick({1, 1, 2, 3});
        q.padding[i] = r.Below(q.dilation[i] * (q.kernel[i] - 1) + 2);
        q.output_padding[i] = r.Below(3) == 0 ? r.Below(std::max(q.stride[i], q.dilation[i])) : 0;
        q.in[i] = r.Pick({1, 2, 3, 5, 8});
      });
  SetMode(p, seed % 4 + 1);         // tf32, fp32x3, bf16, f16
  if (TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
bool IsGemmWgmma(const gen::Config& c) { return c.family == "gemm_wgmma"; }
FAMILY_SUITE(RandomGemmWgmma, 60, 10000, 18000, 500, GemmWgmmaProblem, IsGemmWgmma, nullptr, true);

// gemm_wgmma's opt-in 3xFP16 tiles scale each operand by a power of two from its largest finite
// magnitude: they keep fp32x3's contract where each operand's values lie within about 2^20 of its
// largest (README: past ~2^22 x an operand's RMS, values that do not dominate the output lose
// too much). On suite draws in fp32x3, every 3xFP16 candidate with the input and weights scaled
// far apart (x 2^100 and w 2^-90; x 2^-100 and w 2^60: an fp16 range alone would overflow or
// flush them); with 1 in 97 inputs 2^24 above the rest (they dominate the outputs they reach);
// and with input channel 0 at 2^16 times the rest and its weights zero (it sets the input's scale
// and adds nothing: the others keep the contract within the documented range).
Problem HalfSplitProblem(Draws& r, int seed, int draw) {
  return GemmWgmmaProblem(r, 4 * seed + 1, draw);  // fp32x3
}
bool IsHalfSplit(const gen::Config& c) { return c.family == "gemm_wgmma" && c.split == 4; }
const FamilySuite kHalfSplitSuite{52000, 0, 500, HalfSplitProblem, IsHalfSplit, nullptr, true};
class GemmWgmmaHalfSplitRange : public ::testing::TestWithParam<int> {};
TEST_P(GemmWgmmaHalfSplitRange, ScaledAndWideRangeOperandsMeetTheContract) {
  const int seed = GetParam();
  Problem p;
  std::vector<gen::Config> kept;
  ASSERT_NO_FATAL_FAILURE(DrawFamilyProblem(kHalfSplitSuite, seed, p, kept));
  REQUIRE_GPU();
  const std::string arch = rt::QueryDevice(0)->arch();
  std::vector<rt::CompileRequest> reqs;
  for (const auto& c : kept) {
    auto src = gen::BuildSource(p, c);
    ASSERT_OK(src) << c.Name();
    reqs.push_back({c.Name(), src.value(), gen::CompileArch(c, arch), {c.Name()}, {}});
  }
  const auto compiled = rt::CompileAll(reqs, 0);
  const double x_scale[4] = {std::ldexp(1.0, 100), std::ldexp(1.0, -100), 1.0, 1.0};
  const double w_scale[4] = {std::ldexp(1.0, -90), std::ldexp(1.0, 60), 1.0, 1.0};
  const int64_t vol = p.in[0] * p.in[1] * p.in[2], w_row = p.WeightElements() / p.c_in;
  for (int form = 0; form < 4; ++form) {
    Data d = MakeData(p, 52000 + 10 * seed + form);
    for (size_t i = 0; i < d.x.size(); ++i) {
      d.x[i] *= form == 2 && i % 97 == 5 ? std::ldexp(1.0, 24) : x_scale[form];
      if (form == 3 && static_cast<int64_t>(i) / vol % p.c_in == 0) d.x[i] *= std::ldexp(1.0, 16);
    }
    for (size_t i = 0; i < d.w.size(); ++i) {
      d.w[i] *= w_scale[form];
      if (form == 3 && static_cast<int64_t>(i) < w_row) d.w[i] = 0.0;  // input channel 0's
    }
    d.ref = ref::ForwardGather(p, d.x.data(), d.w.data(), p.bias ? d.b.data() : nullptr);
    for (size_t i = 0; i < kept.size(); ++i) {
      const std::string where =
          p.Signature() + " " + kept[i].Name() + " form " + std::to_string(form);
      ASSERT_OK(compiled[i].status) << where;
      auto err = Check(p, kept[i], compiled[i].cubin, d);
      ASSERT_OK(err) << where;
      EXPECT_EQ(err->nonfinite, 0) << where;
      EXPECT_LE(err->rel_l2, ToleranceOf(p)) << where << ": rel_l2 " << err->rel_l2;
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Gpu, GemmWgmmaHalfSplitRange, ::testing::Range(0, 6));

// The range suite's draws reach the phase-channel form (subpixel_: the user's weights are not
// the sub-problem's kernel, so the weights' scale must read the user's tensor) and the plain one.
TEST(GemmWgmmaHalfSplitRangeDraws, ReachPhaseChannelAndPlainTiles) {
  int phase_channels = 0, plain = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(kHalfSplitSuite, 6, [&](const Problem&, const std::vector<gen::Config>& kept) {
        for (const gen::Config& c : kept) (c.lattice == 2 ? phase_channels : plain) += 1;
      }));
  EXPECT_GT(phase_channels, 0);
  EXPECT_GT(plain, 0);
}

// gemm_wgmma's channels-on-M forms (cm: the weights as the wgmma's A, 128 or 256 positions as
// its N), which only 64-channel tiles take: the suite's random problems with 40, 48, 64, 72 or
// 136 output channels per group (a padded tile, a whole tile, a tile and a remainder, two and a
// remainder), every cm candidate of each.
Problem GemmWgmmaWideProblem(Draws& r, int seed, int draw) {
  Problem p = GemmWgmmaProblem(r, seed, draw);
  if (p.n == 0) return p;
  p.c_out = p.groups * r.Pick({40, 48, 64, 72, 136});
  const double products = static_cast<double>(p.n) * p.c_in * (p.c_out / p.groups) * p.in[0] *
                          p.in[1] * p.in[2] * p.kernel[0] * p.kernel[1] * p.kernel[2];
  if (products > 6e7) p.n = 0;  // invalid: redrawn
  return p;
}
bool IsGemmWgmmaCm(const gen::Config& c) { return c.family == "gemm_wgmma" && c.cm == 1; }
FAMILY_SUITE(RandomGemmWgmmaCm, 24, 11000, 19000, 500, GemmWgmmaWideProblem, IsGemmWgmmaCm, nullptr,
             true);

// gemm_wgmma's halo forms (hl: each channel chunk's input box once for all of a phase's taps,
// the taps' A operands windows of it): random problems of stride 1-3, kernel 1-5, dilation 1-2,
// groups, bias, cropping padding, output_padding, extents that leave partial 8 x 8 boxes and
// halos past the input on every side, 8-72 input channels per group (a partial last chunk, two
// chunks) and 8-72 output channels (40, 64 and 72: the channels-on-M halo forms, a padded tile,
// one tile, a tile and a remainder; with one or two planes a warpgroup), in tf32, bf16 and f16;
// every halo candidate of each.
Problem GemmWgmmaHaloProblem(Draws& r, int seed, int) {
  Problem p =
      r.NewProblem({1, 1, 2}, {8, 24, 64, 72}, {8, 40, 64, 72}, {1, 2}, [&](Problem& q, int i) {
        q.stride[i] = r.Pick({1, 2, 2, 3});
        q.kernel[i] = r.Pick({1, 2, 3, 4, 5});
        q.dilation[i] = r.Pick({1, 1, 2});
        q.padding[i] = r.Below(q.dilation[i] * (q.kernel[i] - 1) + 2);
        q.output_padding[i] = r.Below(3) == 0 ? r.Below(std::max(q.stride[i], q.dilation[i])) : 0;
        q.in[i] = r.Pick({3, 6, 9, 13});
      });
  SetMode(p, seed % 3 == 0 ? 1 : seed % 3 + 2);  // tf32, bf16, f16
  if (TooManyProducts(p)) p.n = 0;               // invalid: redrawn
  return p;
}
bool IsGemmWgmmaHalo(const gen::Config& c) { return c.family == "gemm_wgmma" && c.hl > 0; }
FAMILY_SUITE(RandomGemmWgmmaHalo, 30, 14500, 22500, 500, GemmWgmmaHaloProblem, IsGemmWgmmaHalo);

// gemm_wgmma's epilogue store paths (plain channels; phase-channel rows inside y; the general
// loop at y's edges) where the other suites draw few problems: phase-channel (subpixel_) tiles
// with W stride 8 or 16 (runs of W phases longer than a thread pair) and 3 (no run), and plain
// tiles with 2-3 groups of 40 output channels (the channels-on-M forms pad them to a 64-channel
// tile: a store past the group's channels would land in the next group's). tf32, fp32x3, bf16
// and f16 in turn; every gemm_wgmma candidate of each problem, on NaN-poisoned output.
Problem GemmWgmmaEpilogueProblem(Draws& r, int seed, int) {
  const int kind = seed % 3;
  auto dim = [&](Problem& q, int i) {
    q.stride[i] = r.Pick({1, 2});
    q.kernel[i] = r.Pick({1, 2, 3});
    q.in[i] = r.Pick({2, 3, 5});
    if (i == 2 && kind < 2) {
      q.stride[i] = kind == 0 ? r.Pick({8, 16}) : 3;
      q.kernel[i] = q.stride[i] + r.Pick({1, 2});
      q.in[i] = r.Pick({2, 3});
    }
    q.padding[i] = r.Below(q.kernel[i]);
    q.output_padding[i] = r.Below(3) == 0 ? r.Below(q.stride[i]) : 0;
  };
  Problem p = kind == 2 ? r.NewProblem({2, 3}, {8, 16}, {40}, {1, 2}, dim)
                        : r.NewProblem({1}, {8, 16}, {2, 4}, {1, 2}, dim);
  SetMode(p, seed / 3 % 4 + 1);     // tf32, fp32x3, bf16, f16
  if (TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
FAMILY_SUITE(GemmWgmmaEpiloguePaths, 12, 15300, 23300, 500, GemmWgmmaEpilogueProblem, IsGemmWgmma);

// gemm_simt (templates/gemm_simt.cu): the gemm_wgmma suite's random problems (any stride 1-4,
// kernel 1-7, dilation 1-3, groups, bias, cropping padding, output_padding, odd extents, 1-72
// input and 1-136 output channels per group) in strict fp32, and every fifth a deep one (K up to
// 8 x 512 at kernel 4, stride 2: the stage-wise sums must keep strict fp32's 1e-6). Every gemm_simt
// candidate of each.
Problem GemmSimtProblem(Draws& r, int seed, int draw) {
  Problem p = GemmWgmmaProblem(r, seed, draw);
  p.dtype = DType::kF32;
  p.precision = Precision::kFp32;
  if (p.n > 0 && seed % 5 == 4) {
    p.groups = 1;
    p.c_in = r.Pick({256, 512});
    p.c_out = r.Pick({8, 24});
    p.n = 1;
    p.in = {2, 3, 4};
    for (int i = 0; i < 3; ++i) p.kernel[i] = 4, p.stride[i] = 2, p.padding[i] = 1;
    for (int i = 0; i < 3; ++i) p.dilation[i] = 1, p.output_padding[i] = 0;
  }
  return p;
}
bool IsGemmSimt(const gen::Config& c) { return c.family == "gemm_simt"; }
FAMILY_SUITE(RandomGemmSimt, 40, 12000, 20000, 500, GemmSimtProblem, IsGemmSimt);

// shuffle_wgmma (templates/shuffle_wgmma.cu): random kernel == stride problems (1-3 per
// dimension, at least one above 1; dilation along one-tap dimensions), with groups, bias, 1-72
// input and 1-40 output channels per group (partial K chunks, several chunks, column slices past
// one block's, odd column counts), volumes that leave a partial last row tile and W extents that
// are not multiples of 8, and every fifth a latent layer (input volume 1, any stride); tf32,
// fp32x3, bf16 and f16 in turn. Every shuffle_wgmma candidate of each.
Problem ShuffleWgmmaProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem({1, 1, 2, 3}, {1, 3, 8, 16, 40, 72}, {1, 5, 8, 24, 40}, {1, 2},
                           [&](Problem& q, int i) {
                             q.kernel[i] = q.stride[i] = r.Pick({1, 2, 2, 3});
                             q.dilation[i] = q.kernel[i] == 1 ? r.Pick({1, 2}) : 1;
                             q.padding[i] = q.output_padding[i] = 0;
                             q.in[i] = r.Pick({2, 4, 5, 8, 12, 16});
                           });
  SetMode(p, seed % 4 + 1);  // tf32, fp32x3, bf16, f16
  if (seed % 5 == 4) {
    // A latent vector's first layer: input volume 1, any stride, kernel 1-5, 8-64 samples, 8 or
    // 16 input channels per group times 1-9.
    p.in = {1, 1, 1};
    for (int i = 0; i < 3; ++i) {
      p.kernel[i] = r.Pick({1, 2, 4, 5});
      p.stride[i] = r.Pick({1, 2, 3});
      p.dilation[i] = 1;
    }
    p.n = r.Pick({8, 20, 64});
    p.c_in = p.groups * 8 * r.Pick({1, 2, 3, 9});
  }
  const int64_t vol = p.in[0] * p.in[1] * p.in[2];
  // Whole 16-byte channel planes (or sample rows) and at least two taps, else redrawn.
  const int64_t unit = vol == 1 ? p.c_in / p.groups : vol;
  if (unit * DTypeBytes(p.dtype) % 16 != 0 || p.kernel[0] * p.kernel[1] * p.kernel[2] == 1) p.n = 0;
  if (TooManyProducts(p)) p.n = 0;
  return p;
}
bool IsShuffleWgmma(const gen::Config& c) { return c.family == "shuffle_wgmma"; }
FAMILY_SUITE(RandomShuffleWgmma, 40, 11000, 19000, 500, ShuffleWgmmaProblem, IsShuffleWgmma);

// The suite's draws reach the epilogue's three store paths: W tap pairs (kernel W 2) in row
// tiles that are whole, those that end past the volume (a sample's last tile of 64 or 128
// positions), and the latent layers' per-sample rows.
// The epilogue suite reaches what its comment promises: subpixel tiles at W strides 8/16 and 3,
// and padded channels-on-M tiles of grouped plain problems, in every type.
TEST(GemmWgmmaEpilogueDraws, ReachLongPhaseRunsStrideThreeAndPaddedGroups) {
  const FamilySuite suite{15300, 0, 500, GemmWgmmaEpilogueProblem, IsGemmWgmma};
  int long_runs = 0, stride3 = 0, padded_groups = 0;
  std::set<DType> types;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(suite, 12, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        types.insert(p.dtype);
        auto any = [&](auto pred) { return std::any_of(kept.begin(), kept.end(), pred); };
        const bool sub = any([](const gen::Config& c) { return c.lattice == 2; });
        long_runs += sub && p.stride[2] >= 8;
        stride3 += sub && p.stride[2] == 3;
        padded_groups += p.groups > 1 && any([](const gen::Config& c) {
                           return c.lattice == 0 && c.cm != 0 && c.bn == 64;
                         });
      }));
  EXPECT_GE(long_runs, 3);
  EXPECT_GE(stride3, 3);
  EXPECT_GE(padded_groups, 3);
  EXPECT_GE(types.size(), 3u);
}

TEST(DirectTileCpDraws, ReachStridesChunksRunsAndScalarCopies) {
  const FamilySuite suite{7300, 0, 500, DirectTileCpProblem, IsDirectTileCp};
  int stride3 = 0, four_chunks = 0, groups = 0, dilated = 0, scalar_rows = 0, bias = 0, runs = 0;
  int scalar_weights = 0;
  std::set<Precision> modes;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(suite, 32, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        const int64_t cin_g = p.c_in / p.groups;
        for (int i = 0; i < 3; ++i) stride3 += p.stride[i] == 3, dilated += p.dilation[i] > 1;
        four_chunks += std::any_of(kept.begin(), kept.end(),
                                   [&](const gen::Config& c) { return cin_g / c.ck == 4; });
        groups += p.groups > 1;
        scalar_rows += p.in[2] % 2 != 0;  // no 8- or 16-byte halo copies
        bias += p.bias;
        modes.insert(p.precision);
        for (const gen::Config& c : kept) EXPECT_EQ(cin_g % c.ck, 0) << c.Name();
        runs += std::any_of(kept.begin(), kept.end(), [&](const gen::Config& c) {
          return gen::TileShapeOf(p, c).k_chunk * (cin_g / c.ck) > 256;  // runs of chunks
        });
        // A chunk's weights not a whole number of 16-byte units: copied element by element.
        scalar_weights += std::any_of(kept.begin(), kept.end(), [&](const gen::Config& c) {
          const gen::TileShape s = gen::TileShapeOf(p, c);
          return c.ck * std::max(s.jmax[0], 1) * std::max(s.jmax[1], 1) * p.kernel[2] * c.cob % 4 !=
                 0;
        });
      }));
  EXPECT_GE(runs, 4);
  EXPECT_GE(scalar_weights, 2);
  EXPECT_GE(stride3, 6);
  EXPECT_GE(four_chunks, 8);
  EXPECT_GE(groups, 4);
  EXPECT_GE(dilated, 6);
  EXPECT_GE(scalar_rows, 4);
  EXPECT_GE(bias, 8);
  EXPECT_EQ(modes.size(), 3u);
}

TEST(WinogradStridedDraws, ReachStrideThreeUnequalPhasesAndGroups) {
  const FamilySuite suite{6700, 0, 500, WinogradStridedProblem, IsWinograd};
  int stride3 = 0, unequal = 0, groups = 0, cropped = 0, taps3 = 0, runs = 0, idle = 0, flat_w = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(suite, 30, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        flat_w += p.stride[2] == 1 && p.stride[0] * p.stride[1] > 1;
        idle += std::any_of(kept.begin(), kept.end(), [&](const gen::Config& c) {
          const gen::WinoShape s = gen::WinoShapeOf(p, c);
          return s.threads != s.points * (c.bn / c.tn) * (s.tiles_per_block / c.tm);
        });
        const Dim3 out = p.OutSize();
        bool s3 = false, uneq = false, crop = false, t3 = false;
        for (int i = 0; i < 3; ++i) {
          s3 |= p.stride[i] == 3;
          uneq |= out[i] % p.stride[i] != 0;  // phase 0 has more outputs than the last
          crop |= p.padding[i] > p.kernel[i] - p.stride[i];
          t3 |= p.kernel[i] == 3 * p.stride[i] && p.stride[i] > 1;
        }
        stride3 += s3, unequal += uneq, cropped += crop, taps3 += t3;
        groups += p.groups > 1;
        runs += p.c_in / p.groups > 128;
      }));
  EXPECT_GE(stride3, 4);
  EXPECT_GE(unequal, 6);
  EXPECT_GE(groups, 3);
  EXPECT_GE(cropped, 4);
  EXPECT_GE(taps3, 4);
  EXPECT_GE(runs, 4);
  EXPECT_GE(idle, 8);    // blocks with idle GEMM lanes (27 or 36 points)
  EXPECT_GE(flat_w, 6);  // W unstrided beside a strided dimension: paired W stores
}

TEST(ShuffleWgmmaDraws, ReachPairsPartialTilesAndLatentRows) {
  const FamilySuite suite{11000, 0, 500, ShuffleWgmmaProblem, IsShuffleWgmma};
  int pairs = 0, pairs_partial = 0, latent = 0, sixteen_bit = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(suite, 40, [&](const Problem& p, const std::vector<gen::Config>&) {
        const int64_t vol = p.in[0] * p.in[1] * p.in[2];
        latent += vol == 1;
        if (vol == 1 || p.kernel[2] != 2) return;
        ++pairs;
        sixteen_bit += p.dtype == DType::kBF16 || p.dtype == DType::kF16;
        pairs_partial += vol % 64 != 0;
      }));
  EXPECT_GE(pairs, 8);
  EXPECT_GE(pairs_partial, 4);
  EXPECT_GE(sixteen_bit, 3);
  EXPECT_GE(latent, 4);
}

// shuffle_wgmma's less travelled paths on the suite's problems: the persistent grid capped at
// one block (which walks every column slice and row tile), and the output one element past
// its alignment (no paired stores: element by element).
// Every kept candidate of `suite`'s problem `seed` on one persistent block, then with the
// weights and output one element past alignment (data seeds check_seed and check_seed + 1000).
void CheckOneBlockAndMisaligned(const FamilySuite& suite, int seed, uint64_t check_seed,
                                bool and_both = false) {
  Problem p;
  std::vector<gen::Config> kept;
  ASSERT_NO_FATAL_FAILURE(DrawFamilyProblem(suite, seed, p, kept));
  REQUIRE_GPU();
  const int n = static_cast<int>(kept.size());
  EXPECT_EQ(CheckAll(p, kept, check_seed, {1, false}), n) << "one block: " << p.Signature();
  EXPECT_EQ(CheckAll(p, kept, check_seed + 1000, {0, true}), n) << "misaligned: " << p.Signature();
  if (and_both)  // one block walking every slice with operands the consumers load themselves
    EXPECT_EQ(CheckAll(p, kept, check_seed + 2000, {1, true}), n)
        << "one block, misaligned: " << p.Signature();
}

class ShuffleWgmmaPaths : public ::testing::TestWithParam<int> {};
TEST_P(ShuffleWgmmaPaths, OneBlockAndMisalignedOutputMatchReference) {
  CheckOneBlockAndMisaligned({11000, 0, 500, ShuffleWgmmaProblem, IsShuffleWgmma}, GetParam(),
                             32000 + GetParam());
}
INSTANTIATE_TEST_SUITE_P(Gpu, ShuffleWgmmaPaths, ::testing::Range(0, 8));

// gemm_wgmma's halo forms on one persistent block, so that a block takes many more halo boxes
// than it has slots (every slot's empty barrier waited on, its parity flipped many times, in
// plain, ping-pong and channels-on-M forms), then with the output misaligned; every other
// problem with 160 or 200 input channels per group (3-7 channel chunks a tile).
Problem GemmWgmmaHaloPathsProblem(Draws& r, int seed, int draw) {
  Problem p = GemmWgmmaHaloProblem(r, seed, draw);
  if (p.n == 0 || seed % 2 == 1) return p;
  p.c_in = p.groups * r.Pick({160, 200});
  if (TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
class GemmWgmmaHaloPaths : public ::testing::TestWithParam<int> {};
TEST_P(GemmWgmmaHaloPaths, OneBlockAndMisalignedOutputMatchReference) {
  CheckOneBlockAndMisaligned({14600, 0, 500, GemmWgmmaHaloPathsProblem, IsGemmWgmmaHalo},
                             GetParam(), 34000 + GetParam());
}
INSTANTIATE_TEST_SUITE_P(Gpu, GemmWgmmaHaloPaths, ::testing::Range(0, 8));

// shuffle_simt (templates/shuffle_simt.cu): the shuffle_wgmma suite's kernel == stride problems
// (1-3 per dimension, groups, bias, 1-72 input and 1-40 output channels per group, partial
// row tiles, W extents that are not multiples of 4, tap counts that are not multiples of 4: the
// element-wise epilogue; every fifth a latent layer: input volume 1, any stride, 8-64 samples)
// in strict fp32; every fourth of the others a deep one (320 or 520 input channels: plain sums
// of 320 products and stage-wise sums past 512 must keep strict fp32's 1e-6, and a partial last
// stage). Every shuffle_simt candidate of each.
Problem ShuffleSimtProblem(Draws& r, int seed, int draw) {
  Problem p = ShuffleWgmmaProblem(r, seed, draw);
  p.dtype = DType::kF32;
  p.precision = Precision::kFp32;
  if (p.n > 0 && seed % 4 == 3 && seed % 5 != 4) {
    p.groups = 1;
    p.c_in = r.Pick({320, 520});
    p.c_out = r.Pick({3, 16});
    p.n = 1;
    p.in = {2, 4, 6};
  }
  return p;
}
bool IsShuffleSimt(const gen::Config& c) { return c.family == "shuffle_simt"; }
FAMILY_SUITE(RandomShuffleSimt, 32, 11500, 19500, 500, ShuffleSimtProblem, IsShuffleSimt);

// shuffle_simt over padded planes: the suite's problems made pixel shuffles with odd extents in
// every dimension (input volumes 3-729, never a multiple of 4: the _prepx copy into planes padded
// with zeros to whole 16-byte units, a plane's last quad crossing its end, and K splits whose
// column buffer keeps the padded planes; every fourth a deep one, 320 or 520 channels).
Problem ShuffleSimtPaddedProblem(Draws& r, int seed, int draw) {
  Problem p = ShuffleSimtProblem(r, seed, draw);
  if (p.n == 0) return p;
  for (int i = 0; i < 3; ++i) {
    p.in[i] = r.Pick({1, 3, 5, 7, 9});
    p.kernel[i] = p.stride[i];
    p.padding[i] = 0, p.output_padding[i] = 0, p.dilation[i] = 1;
  }
  if (p.in[0] * p.in[1] * p.in[2] == 1) p.in[2] = 3;
  if (TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
FAMILY_SUITE(RandomShuffleSimtPadded, 16, 12700, 20700, 500, ShuffleSimtPaddedProblem,
             IsShuffleSimt);

// Makes p two groups, of input and output channels per group drawn from `cin` and `cout`.
void TwoGroups(Draws& r, Problem& p, std::initializer_list<int> cin,
               std::initializer_list<int> cout) {
  p.groups = 2;
  p.c_in = 2 * r.Pick(cin);
  p.c_out = 2 * r.Pick(cout);
}

// Padded planes in the split form with several samples and groups (the column buffer's per-sample
// and per-group strides of padded planes) and volumes of 2 mod 4 (two padding positions a plane):
// 2 samples, 2 groups of 96-160 input channels (K in parts) and 8-40 output channels, extents
// whose product is 2 mod 4.
Problem ShuffleSimtPaddedSplitProblem(Draws& r, int seed, int draw) {
  Problem p = ShuffleSimtPaddedProblem(r, seed, draw);
  if (p.n == 0) return p;
  p.n = 2;
  TwoGroups(r, p, {96, 128, 160}, {8, 24, 40});
  p.in = {1, r.Pick({1, 3, 5}), 2 * r.Pick({1, 3, 5})};
  if (p.in[1] * p.in[2] == 2) p.in[1] = 3;
  if (TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
FAMILY_SUITE(RandomShuffleSimtPaddedSplit, 6, 12800, 20800, 500, ShuffleSimtPaddedSplitProblem,
             IsShuffleSimt);

// The split suite's draws are 2 mod 4 in volume and offer K in parts.
TEST(ShuffleSimtPaddedDraws, SplitSuiteReachesPartsOverSamplesAndGroups) {
  const FamilySuite suite{12800, 0, 500, ShuffleSimtPaddedSplitProblem, IsShuffleSimt};
  int split = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(suite, 6, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        EXPECT_EQ(p.in[0] * p.in[1] * p.in[2] % 4, 2) << p.Signature();
        EXPECT_EQ(p.groups, 2);
        for (const gen::Config& c : kept) split += c.sk > 1;
      }));
  EXPECT_GE(split, 6);
}

// The padded suite reaches both forms: the direct one and K splits through the column buffer.
TEST(ShuffleSimtPaddedDraws, ReachDirectAndSplitForms) {
  const FamilySuite suite{12700, 0, 500, ShuffleSimtPaddedProblem, IsShuffleSimt};
  int direct = 0, split = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(suite, 16, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        EXPECT_NE(p.in[0] * p.in[1] * p.in[2] % 4, 0) << p.Signature();
        for (const gen::Config& c : kept) ++(c.sk > 1 ? split : direct);
      }));
  EXPECT_GE(direct, 8);
  EXPECT_GE(split, 2);
}

// shuffle_simt's overlapping form (the column buffer and its overlap-add): random problems with
// any stride 1-4, kernel 1-5, dilation 1-2, cropping padding and output_padding, groups, bias,
// 48-400 input channels per group (K splits of 2-8 parts, a partial last stage; every sixth
// problem 600 channels over a small volume: stage-wise sums past 512 per part) and 1-24 output
// channels per group (partial column slices), input volumes a multiple of 4 (else redrawn: whole
// 16-byte channel planes); strict fp32; every sixth (another) with W taps summed in the tiles
// (W stride 2, kernel 3 or 4, padding 1, 8 wide: the folded form, W neighbours on one or both
// sides). Every shuffle_simt candidate of each (the pixel shuffles among the draws take the
// direct form).
Problem ShuffleSimtOverlapProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem(
      {1, 1, 2}, {48, 64, 100, 192, 400}, {1, 3, 8, 24}, {1, 2, 3}, [&](Problem& q, int i) {
        q.stride[i] = r.Pick({1, 2, 2, 3, 4});
        q.kernel[i] = r.Pick({1, 2, 3, 3, 4, 5});
        q.dilation[i] = r.Pick({1, 1, 2});
        q.padding[i] = r.Below(q.dilation[i] * (q.kernel[i] - 1) + 2);
        q.output_padding[i] = r.Below(3) == 0 ? r.Below(std::max(q.stride[i], q.dilation[i])) : 0;
        q.in[i] = r.Pick({1, 2, 3, 4, 5, 6, 8});
      });
  p.dtype = DType::kF32;
  p.precision = Precision::kFp32;
  if (seed % 6 == 5) {
    p.groups = 1;
    p.c_in = 600;
    p.c_out = r.Pick({3, 16});
    p.n = 1;
    p.in = {2, 2, 4};
  } else if (seed % 6 == 2) {
    p.stride[2] = 2;
    p.kernel[2] = r.Pick({3, 4});
    p.padding[2] = 1;
    p.dilation[2] = 1;
    p.output_padding[2] = r.Below(2);
    p.in[2] = 8;
  }
  const int64_t vol = p.in[0] * p.in[1] * p.in[2];
  if (vol % 4 != 0 || TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
FAMILY_SUITE(RandomShuffleSimtOverlap, 24, 12500, 20500, 500, ShuffleSimtOverlapProblem,
             IsShuffleSimt);

// Row tiles over several samples at batch sizes the suites above do not draw: their problems
// with 4, 6 or 8 samples (kNT up to 8, kPS down to 4 positions), every third with 2 groups of
// 96-128 input channels (K splits where taps overlap); even seeds the pixel shuffles', odd ones
// the overlapping taps'. Every shuffle_simt candidate of each.
Problem ShuffleSimtSamplesProblem(Draws& r, int seed, int draw) {
  Problem p =
      seed % 2 == 0 ? ShuffleSimtProblem(r, seed, draw) : ShuffleSimtOverlapProblem(r, seed, draw);
  if (p.n == 0 || p.in[0] * p.in[1] * p.in[2] == 1) return p;
  p.n = r.Pick({4, 6, 8});
  if (seed % 3 == 0) TwoGroups(r, p, {96, 128}, {8, 24});
  if (TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
FAMILY_SUITE(RandomShuffleSimtSamples, 8, 12900, 20900, 500, ShuffleSimtSamplesProblem,
             IsShuffleSimt);

// The samples suite reaches four or more samples a tile, and tiles over samples with groups
// and with K splits.
TEST(ShuffleSimtDraws, SamplesSuiteReachesWideTilesGroupsAndSplits) {
  const FamilySuite suite{12900, 0, 500, ShuffleSimtSamplesProblem, IsShuffleSimt};
  int wide = 0, grouped = 0, split = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(suite, 8, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        for (const gen::Config& c : kept) {
          auto src = gen::BuildSource(p, c);
          ASSERT_TRUE(src.ok()) << src.status().message();
          const size_t at = src->find("constexpr int kNT = ");
          ASSERT_NE(at, std::string::npos);
          const int nt = std::stoi(src->substr(at + 20));
          if (nt == 1) continue;
          wide += nt >= 4;
          grouped += p.groups > 1;
          split += c.sk > 1;
        }
      }));
  EXPECT_GE(wide, 2);
  EXPECT_GE(grouped, 2);
  EXPECT_GE(split, 1);
}

// Visits the first `seeds` draws of both shuffle_simt suites (the pixel shuffles and the
// overlapping taps) with the candidates each checks.
template <typename Visit>
void ForEachShuffleSimtDraw(int seeds, Visit visit) {
  for (const FamilySuite& suite :
       {FamilySuite{11500, 0, 500, ShuffleSimtProblem, IsShuffleSimt},
        FamilySuite{12500, 0, 500, ShuffleSimtOverlapProblem, IsShuffleSimt}})
    ASSERT_NO_FATAL_FAILURE(ForEachDraw(suite, seeds, visit));
}

// The first 8 draws of both shuffle_simt suites (those ShuffleSimtPaths runs on one block and
// misaligned) offer tiles that copy by tensor maps, in the column form too: there one persistent
// block's boxes rewrite slots and B that its consumers released, slice after slice, and the
// misaligned weights leave them a zeroed weight map (the consumers load B).
TEST(ShuffleSimtDraws, PathsReachTensorMapTiles) {
  int tma = 0, tma_columns = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachShuffleSimtDraw(8, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        for (const gen::Config& c : kept) {
          if (!c.ws) continue;
          ++tma;
          tma_columns += gen::Launches(p, c).steps.size() > 1;
        }
      }));
  EXPECT_GE(tma, 16);
  EXPECT_GE(tma_columns, 4);
}

// The same draws offer tiles that stream B with every stage (bst 2), at two and three blocks
// per SM, in the column form too: a persistent block's stages carry their own rows of B, which
// its consumers load themselves where the weights are misaligned.
TEST(ShuffleSimtDraws, PathsReachStreamedBTiles) {
  int streamed = 0, columns = 0, three = 0, split = 0, short_last = 0, ring = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachShuffleSimtDraw(8, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        for (const gen::Config& c : kept) {
          if (c.bst != 2) continue;
          ++streamed;
          columns += gen::Launches(p, c).steps.size() > 1;
          three += c.mb == 3;
          // K in parts; a last stage of fewer rows (the box's extra rows unread); more stages a
          // slice than slots (each slot's rows rewritten within a slice).
          const int64_t k_split = p.c_in / p.groups / c.sk;
          split += c.sk > 1;
          short_last += k_split % c.ck != 0;
          ring += (k_split + c.ck - 1) / c.ck > c.st;
        }
      }));
  EXPECT_GE(streamed, 8);
  EXPECT_GE(columns, 2);
  EXPECT_GE(three, 2);
  EXPECT_GE(split, 1);
  EXPECT_GE(short_last, 1);
  EXPECT_GE(ring, 1);
}

// Both suites reach row tiles over several samples (kNT > 1), in the direct and column forms.
TEST(ShuffleSimtDraws, ReachRowTilesOverSamples) {
  int direct = 0, columns = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachShuffleSimtDraw(24, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        for (const gen::Config& c : kept) {
          auto src = gen::BuildSource(p, c);
          ASSERT_TRUE(src.ok()) << src.status().message();
          if (src->find("kNT = 1;") != std::string::npos) continue;
          ++(gen::Launches(p, c).steps.size() > 1 ? columns : direct);
        }
      }));
  EXPECT_GE(direct, 2);
  EXPECT_GE(columns, 2);
}

// Both shuffle_simt suites reach tiles with a side of three warps (96 positions or 192
// columns: the row tiles and column slices those sides leave partial).
TEST(ShuffleSimtDraws, ReachThreeWarpSides) {
  int rows3 = 0, cols3 = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachShuffleSimtDraw(24, [&](const Problem&, const std::vector<gen::Config>& kept) {
        for (const gen::Config& c : kept) rows3 += c.wm == 3, cols3 += c.wn == 3;
      }));
  EXPECT_GE(rows3, 4);
  EXPECT_GE(cols3, 4);
}

// The overlap suite's draws reach what its comment promises (checked without a GPU): K in
// parts, stage-wise sums within a part, a W stride of 4 (the compile-time W tap matches), and
// the folded form with W neighbours on one side (kernel 3) and on both (kernel 4).
TEST(ShuffleSimtOverlapDraws, ReachKPartsStagedSumsStrideFourAndFolds) {
  const FamilySuite suite{12500, 0, 500, ShuffleSimtOverlapProblem, IsShuffleSimt};
  int parts = 0, staged = 0, stride4 = 0, folded3 = 0, folded4 = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(suite, 24, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        stride4 += p.stride[2] == 4;
        for (const gen::Config& c : kept) {
          parts += c.sk > 1;
          staged += p.c_in / p.groups / c.sk > 512;
        }
        auto src = gen::BuildSource(p, kept[0]);
        ASSERT_TRUE(src.ok()) << src.status().message();
        if (src->find("constexpr bool kFoldW = true;") != std::string::npos) {
          folded3 += p.kernel[2] == 3;
          folded4 += p.kernel[2] == 4;
        }
      }));
  EXPECT_GT(parts, 0);
  EXPECT_GT(staged, 0);
  EXPECT_GT(stride4, 0);
  EXPECT_GT(folded3, 0);
  EXPECT_GT(folded4, 0);
}

// shuffle_simt's less travelled paths, on the problems of the two suites above: the persistent
// grid capped at one block, which then walks every column slice and K part (B reloaded per
// slice, its barriers' parities) and every row tile; the weights and output one element past
// 16-byte alignment (B loaded by the consumer warps, element-wise stores); and both at once
// (the consumers' own B loads slice after slice, streamed B stage after stage).
class ShuffleSimtPaths : public ::testing::TestWithParam<int> {};
TEST_P(ShuffleSimtPaths, OneBlockAndMisalignedOperandsMatchReference) {
  for (const FamilySuite& suite :
       {FamilySuite{11500, 0, 500, ShuffleSimtProblem, IsShuffleSimt},
        FamilySuite{12500, 0, 500, ShuffleSimtOverlapProblem, IsShuffleSimt}})
    CheckOneBlockAndMisaligned(suite, GetParam(), 30000 + GetParam(), true);
}
INSTANTIATE_TEST_SUITE_P(Gpu, ShuffleSimtPaths, ::testing::Range(0, 8));

// One dimension of the few-output-channel suites: stride 1-3, kernel 1-5, dilation 1-2, padding
// up to one past the kernel's reach (cropping), sometimes output_padding, odd extents.
void DrawFewChannelDim(Draws& r, Problem& q, int i) {
  q.stride[i] = r.Pick({1, 2, 2, 3});
  q.kernel[i] = r.Pick({1, 2, 3, 4, 5});
  q.dilation[i] = r.Pick({1, 1, 2});
  q.padding[i] = r.Below(q.dilation[i] * (q.kernel[i] - 1) + 2);
  q.output_padding[i] = r.Below(3) == 0 ? r.Below(std::max(q.stride[i], q.dilation[i])) : 0;
  q.in[i] = r.Pick({1, 2, 3, 5, 8, 13});
}

// narrow_gemm (templates/narrow_gemm.cu): random problems with 1-4 output channels per group
// (GEMM rows = channels x D and H phases x W taps, at most 64), any stride 1-3, kernel 1-5,
// dilation 1-2, cropping padding, output_padding, groups, bias, 1-72 input channels per group
// (partial and several chunks), W extents that are not multiples of 4 or 8 (even for 16-bit
// tensors: 4-byte copies), every third one with W rows of whole 16-byte units (the tensor-map
// forms), every seventh with W stride 4, and every fourth a deep one (up to 256 channels at kernel
// 4, stride 2); strict fp32, tf32, fp32x3, bf16 and f16 in turn. Every narrow_gemm candidate of
// each.
Problem NarrowGemmProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem({1, 1, 2, 3}, {1, 3, 8, 16, 40, 72}, {1, 1, 2, 3, 4}, {1, 2},
                           [&](Problem& q, int i) { DrawFewChannelDim(r, q, i); });
  SetMode(p, seed % 5);
  if (seed % 4 == 3) {
    p.groups = 1;
    p.c_in = r.Pick({128, 256});
    p.c_out = r.Pick({1, 2});
    p.n = 1;
    p.in = {3, 4, 6};
    for (int i = 0; i < 3; ++i) p.kernel[i] = 4, p.stride[i] = 2, p.padding[i] = 1;
    for (int i = 0; i < 3; ++i) p.dilation[i] = 1, p.output_padding[i] = 0;
  }
  if (seed % 3 == 1) p.in[2] = r.Pick({8, 16, 24, 40});  // tensor-map forms
  if (seed % 7 == 5) {  // W stride 4: the epilogue's runs of 4 outputs hold one W cell
    p.stride[2] = 4;
    p.kernel[2] = r.Pick({2, 4, 5});
    p.padding[2] = r.Below(p.kernel[2]);
    p.output_padding[2] = r.Below(4);
    p.dilation[2] = 1;
  }
  if (p.dtype != DType::kF32 && p.in[2] % 2 != 0) ++p.in[2];  // whole 4-byte copies
  if (TooManyProducts(p)) p.n = 0;                            // invalid: redrawn
  return p;
}
bool IsNarrowGemm(const gen::Config& c) { return c.family == "narrow_gemm"; }
FAMILY_SUITE(RandomNarrowGemm, 50, 13000, 21000, 500, NarrowGemmProblem, IsNarrowGemm);

// narrow_gemm's less travelled paths on the suite's problems with W rows of whole 16-byte units
// (the tensor-map forms drawn): persistent blocks capped at one, so that one pipeline walks every
// tile (the next tile's copies in flight during a tile's epilogue, by cp.async and by tensor
// map), then the output one element past its alignment (the epilogue's element-wise stores).
Problem NarrowGemmPathsProblem(Draws& r, int seed, int draw) {
  Problem p = NarrowGemmProblem(r, seed, draw);
  if (p.n == 0) return p;
  p.in[2] = r.Pick({8, 16, 24});
  if (TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
constexpr FamilySuite kNarrowGemmPaths{13500, 0, 500, NarrowGemmPathsProblem, IsNarrowGemm};
class NarrowGemmPaths : public ::testing::TestWithParam<int> {};
TEST_P(NarrowGemmPaths, OneBlockAndMisalignedOutputMatchReference) {
  CheckOneBlockAndMisaligned(kNarrowGemmPaths, GetParam(), 36000 + GetParam());
}
INSTANTIATE_TEST_SUITE_P(Gpu, NarrowGemmPaths, ::testing::Range(0, 8));

// The paths suite's draws offer persistent tensor-map candidates (several tiles a block once
// capped at one block).
TEST(NarrowGemmPathsDraws, ReachPersistentTensorMapForms) {
  int persistent_map = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(kNarrowGemmPaths, 8, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        EXPECT_EQ(p.in[2] * DTypeBytes(p.dtype) % 16, 0) << p.Signature();
        for (const gen::Config& c : kept) persistent_map += c.pa == 1 && c.ws == 1;
      }));
  EXPECT_GE(persistent_map, 3);
}

// overlap_wgmma (templates/overlap_wgmma.cu): random problems with 1-4 output channels per group
// whose taps overlap: stride 1-4, kernel 1-7, dilation 1-2, cropping padding, output_padding,
// groups, bias, 1-72 input channels per group (partial and several K chunks), odd D and H extents
// (partial blocks of rows and planes) and W extents of whole 16-byte rows, and every fifth a deep
// layer; tf32, fp32x3, bf16 and f16 in turn. Every overlap_wgmma candidate of each.
Problem OverlapWgmmaProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem(
      {1, 1, 2, 3}, {1, 3, 8, 16, 40, 72}, {1, 1, 2, 3, 4}, {1, 2}, [&](Problem& q, int i) {
        q.stride[i] = r.Pick({1, 2, 2, 3, 4});
        q.kernel[i] = r.Pick({1, 2, 3, 4, 5, 7});
        q.dilation[i] = r.Pick({1, 1, 2});
        q.padding[i] = r.Below(q.dilation[i] * (q.kernel[i] - 1) + 2);
        q.output_padding[i] = r.Below(3) == 0 ? r.Below(std::max(q.stride[i], q.dilation[i])) : 0;
        q.in[i] = i == 2 ? r.Pick({8, 16, 24, 40}) : r.Pick({1, 2, 3, 5, 9, 13});
      });
  SetMode(p, seed % 4 + 1);                                           // tf32, fp32x3, bf16, f16
  if (p.dtype == DType::kF32 && seed % 8 < 4) p.in[2] = p.in[2] / 2;  // 4, 8, 12, 20
  if (seed % 5 == 4) {
    // A deep last layer (64 or 128 -> 1 or 2, k4 s2 p1): several K chunks.
    p.groups = 1, p.n = 2;
    p.c_in = r.Pick({64, 128}), p.c_out = p.c_in == 64 ? r.Pick({1, 2}) : 1;
    p.in = {5, 20, 16};
    for (int i = 0; i < 3; ++i) p.kernel[i] = 4, p.stride[i] = 2, p.padding[i] = 1;
    for (int i = 0; i < 3; ++i) p.dilation[i] = 1, p.output_padding[i] = 0;
  }
  if (TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
bool IsOverlapWgmma(const gen::Config& c) { return c.family == "overlap_wgmma"; }
FAMILY_SUITE(RandomOverlapWgmma, 40, 14000, 22000, 500, OverlapWgmmaProblem, IsOverlapWgmma);

// The suite's draws reach what the kernel handles apart: strides of 3 and 4, dilation, groups,
// output_padding, and both operand widths.
TEST(OverlapWgmmaDraws, ReachStridesDilationGroupsAndTypes) {
  const FamilySuite suite{14000, 0, 500, OverlapWgmmaProblem, IsOverlapWgmma};
  int wide_stride = 0, dilated = 0, grouped = 0, padded_out = 0, sixteen_bit = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(suite, 40, [&](const Problem& p, const std::vector<gen::Config>&) {
        wide_stride += *std::max_element(p.stride.begin(), p.stride.end()) >= 3;
        dilated += *std::max_element(p.dilation.begin(), p.dilation.end()) >= 2;
        grouped += p.groups > 1;
        padded_out += *std::max_element(p.output_padding.begin(), p.output_padding.end()) > 0;
        sixteen_bit += p.dtype == DType::kBF16 || p.dtype == DType::kF16;
      }));
  EXPECT_GE(wide_stride, 6);
  EXPECT_GE(dilated, 6);
  EXPECT_GE(grouped, 4);
  EXPECT_GE(padded_out, 4);
  EXPECT_GE(sixteen_bit, 10);
}

// Blocks past the first wave (the kernel is not persistent: a grid capped at the SMs would leave
// outputs unwritten, which the poisoned output shows): a deep last layer in small blocks of
// output rows and planes, 200 and 400 blocks, bf16 and tf32.
TEST(OverlapWgmmaPaths, BlocksPastTheFirstWaveMatchReference) {
  Problem p =
      test::MakeProblem(2, 64, 1, {5, 20, 16}, {4, 4, 4}).Stride({2, 2, 2}).Padding({1, 1, 1});
  for (int mode : {3, 1}) {  // bf16, tf32
    test::SetMode(p, mode);
    std::vector<gen::Config> configs;
    for (int bqd : {2, 1}) {
      gen::Config c;
      c.family = "overlap_wgmma";
      c.dtype = p.dtype;
      c.split = 1;
      c.wg = 2, c.bqh = 2, c.bqd = bqd, c.ck = mode == 3 ? 64 : 32, c.st = 2;
      ASSERT_GT(gen::Launches(p, c).steps.back().grid[0], 132u) << c.Name();
      configs.push_back(c);
    }
    REQUIRE_GPU();
    EXPECT_EQ(CheckAll(p, configs, 40000 + mode), 2) << p.Signature();
  }
}

// cell_simt (templates/cell_simt.cu): random strict fp32 problems with 1-16 output channels per
// group (several channel blocks of threads past 4), any stride 1-3, kernel 1-5, dilation 1-2,
// cropping padding, output_padding, groups, bias, 1-64 input channels per group (partial stages),
// odd extents (tiles past the output, element-wise copies), every third a last layer's W (kernel
// 3 or 4, stride 2, padding 1 on rows of whole 16-byte units: the unit copies and their halo
// values) and every fifth unstrided along D and H (kernel 3, padding 1: four H cells or two D cells
// per thread); strict fp32, every fourth fp32x3 and every fourth tf32 (plain sums of up to 8192
// products there). Every cell_simt candidate of each, and the first again with one cell per
// thread (element-wise copies, scalar stores), stages of 3 channels and 2 stages.
Problem CellSimtProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem({1, 1, 2}, {1, 3, 8, 16, 40, 64}, {1, 2, 3, 4, 6, 8, 16}, {1, 2},
                           [&](Problem& q, int i) { DrawFewChannelDim(r, q, i); });
  if (seed % 3 == 0) {  // the last layers of U-Nets and GANs: kernel 3 or 4, stride 2, padding 1
    p.in[2] = r.Pick({8, 12, 16, 24});
    p.kernel[2] = seed % 2 ? 4 : 3, p.stride[2] = 2, p.padding[2] = 1, p.dilation[2] = 1;
    p.c_out = p.groups * r.Pick({1, 2});
    p.output_padding[2] = r.Below(2);
    p.stride[0] = std::min<int64_t>(p.stride[0], 2),
    p.stride[1] = std::min<int64_t>(p.stride[1], 2);
  }
  if (seed % 5 == 2) {  // a stride-1 layer along D and H: 2-11 channels, 64-96 in tf32 (below)
    for (int i = 0; i < 2; ++i) {
      p.stride[i] = 1, p.kernel[i] = 3, p.padding[i] = 1, p.dilation[i] = 1;
      p.output_padding[i] = 0, p.in[i] = r.Pick({6, 9, 16});
    }
    p.c_in = p.groups * (seed % 4 == 3 ? r.Pick({64, 96}) : r.Pick({2, 5, 11}));
  }
  if (seed % 4 == 1) SetMode(p, 2);  // fp32x3 and tf32 take the exact FFMA form too
  if (seed % 4 == 3) SetMode(p, 1);
  if (TooManyProducts(p)) p.n = 0;  // invalid: redrawn
  return p;
}
bool IsCellSimt(const gen::Config& c) { return c.family == "cell_simt"; }
void AddCellSimtElementCopies(const Problem& p, std::vector<gen::Config>& cells, int) {
  gen::Config one = cells.front();
  one.vw = 1, one.ck = 3, one.st = 2;
  ASSERT_OK(gen::BuildSource(p, one).status()) << one.Name();
  // And stages of one channel (what the deep stride-1 tiles take).
  gen::Config single = cells.front();
  single.ck = 1, single.st = 3;
  ASSERT_OK(gen::BuildSource(p, single).status()) << single.Name();
  cells.push_back(one);
  cells.push_back(single);
}
FAMILY_SUITE(RandomCellSimt, 40, 13500, 21500, 500, CellSimtProblem, IsCellSimt,
             AddCellSimtElementCopies);

// The draws of RandomCellSimt (no GPU needed) reach what the kernel does differently: 16-byte
// unit copies (kUnit 16) with halo values left of the cells and right of them, element-wise
// copies, stages past the group's channels (a partial last stage), several stride phases along
// W, two cells per thread along H (rows shared between them), four along H or two along D,
// several channel blocks of threads, channel blocks that end inside a warp and blocks of part
// warps (the wave-fitting tiles), fp32x3 and tf32 (past 512 products per output).
TEST(CellSimtDraws, ReachUnitCopiesHalosAndPartialStages) {
  const FamilySuite suite{13500, 0, 500, CellSimtProblem, IsCellSimt};
  int unit16 = 0, unit4 = 0, halo_left = 0, halo_right = 0, partial = 0, w_phases = 0;
  int two_h_cells = 0, four_h_cells = 0, two_d_cells = 0, fp32x3 = 0, tf32_long_sums = 0;
  int channel_blocks = 0, part_warp_channel_blocks = 0, part_warp_blocks = 0;
  ASSERT_NO_FATAL_FAILURE(
      ForEachDraw(suite, 40, [&](const Problem& p, const std::vector<gen::Config>& kept) {
        w_phases += p.stride[2] > 1;
        fp32x3 += p.precision == Precision::kFp32x3;
        // Products per output: the group's channels x the most taps of one phase per dimension.
        int64_t products = p.c_in / p.groups;
        for (int i = 0; i < 3; ++i) {
          std::vector<int64_t> taps(static_cast<size_t>(p.stride[i]), 0);
          for (int64_t t = 0; t < p.kernel[i]; ++t) {
            const int64_t at = t * p.dilation[i] - p.padding[i];
            ++taps[static_cast<size_t>((at % p.stride[i] + p.stride[i]) % p.stride[i])];
          }
          products *= *std::max_element(taps.begin(), taps.end());
        }
        tf32_long_sums += p.precision == Precision::kTf32 && products > 512;
        for (const gen::Config& c : kept) {
          two_h_cells += c.hc > 1;
          four_h_cells += c.hc > 2;
          two_d_cells += c.dc > 1;
          channel_blocks += c.cob < p.c_out / p.groups;
          const int64_t cell_threads = int64_t{c.bx} * c.by * c.bz;
          part_warp_channel_blocks += c.cob < p.c_out / p.groups && cell_threads % 32 != 0;
          part_warp_blocks += cell_threads * (p.c_out / p.groups / c.cob) % 32 != 0;
          auto src = gen::BuildSource(p, c);
          ASSERT_TRUE(src.ok()) << src.status().message();
          const bool u16 = src->find("constexpr int kUnit = 16;") != std::string::npos;
          (u16 ? unit16 : unit4) += 1;
          partial += p.c_in / p.groups % c.ck != 0;
          // W taps that read left of a cell (input c + delta, delta < 0) or right of it: output
          // s * c + r takes tap t where r = (t * dil - pad) mod s, delta = (r + pad - t * dil) / s.
          for (int64_t t = 0; u16 && t < p.kernel[2]; ++t) {
            const int64_t s = p.stride[2], at = t * p.dilation[2] - p.padding[2];
            const int64_t delta = ((at % s + s) % s - at) / s;
            halo_left += delta < 0;
            halo_right += delta > 0;
          }
        }
      }));
  EXPECT_GT(unit16, 0);
  EXPECT_GT(unit4, 0);
  EXPECT_GT(halo_left, 0);
  EXPECT_GT(halo_right, 0);
  EXPECT_GT(partial, 0);
  EXPECT_GT(w_phases, 0);
  EXPECT_GT(two_h_cells, 0);
  EXPECT_GT(four_h_cells, 0);
  EXPECT_GT(two_d_cells, 0);
  EXPECT_GT(fp32x3, 0);
  EXPECT_GT(tf32_long_sums, 0);
  EXPECT_GT(channel_blocks, 0);
  EXPECT_GT(part_warp_channel_blocks, 0);
  EXPECT_GT(part_warp_blocks, 0);
}

// fft (templates/fft_tiling.cu): random stride-1 problems it takes (H x W kernels of 3-7 taps,
// at least 9, dilation 1-2, D kernel 1-3 with dilation), with groups, bias, cropping padding and
// extents that leave partial tiles and partial transform blocks; strict fp32, tf32 and fp32x3
// in turn (FFMA, TF32 and 3xTF32 GEMMs). Every fft candidate, and the first one again in chunks
// of one sample (multi-sample problems) and in chunks of a range of output planes (D_out > 1):
// the chunk loop reuses the workspace's spectra.
Problem FftProblem(Draws& r, int seed, int) {
  Problem p = r.NewProblem({1, 1, 2, 3}, {1, 3, 4, 8, 13}, {2, 5, 8, 16, 20}, {1, 2, 3},
                           [&](Problem& q, int i) {
                             q.kernel[i] = i == 0 ? r.Pick({1, 2, 3}) : r.Pick({3, 4, 5, 7});
                             q.dilation[i] = r.Pick({1, 1, 2});
                             const int64_t extent = q.dilation[i] * (q.kernel[i] - 1);
                             q.padding[i] = r.Below(extent + 2);  // past the extent: cropping
                             q.in[i] = i == 0 ? r.Pick({1, 3, 5}) : r.Pick({3, 7, 12, 20, 33});
                           });
  if (seed % 3 > 0) SetMode(p, seed % 3);  // tf32, fp32x3 (tensor-core GEMMs; FFMA too)
  return p;
}
bool IsFft(const gen::Config& c) { return c.family == "fft"; }
void AddFftChunks(const Problem& p, std::vector<gen::Config>& fft, int seed) {
  if (p.n > 1) {
    gen::Config one = fft.front();
    one.fc = 1;
    ASSERT_EQ(gen::FftShapeOf(p, one).chunks, p.n) << one.Name();
    fft.push_back(one);
  }
  // Chunks of a range of output planes (the form that bounds the workspace of large
  // samples): 1 ... D_out - 1 planes.
  if (const int64_t dout = p.OutSize()[0]; dout > 1) {
    gen::Config planes = fft.front();
    planes.fc = 0, planes.fd = 1 + seed % static_cast<int>(dout - 1);
    ASSERT_EQ(gen::FftShapeOf(p, planes).chunks, p.n * ((dout + planes.fd - 1) / planes.fd))
        << planes.Name();
    fft.push_back(planes);
  }
}
FAMILY_SUITE(RandomFft, 40, 9000, 17000, 500, FftProblem, IsFft, AddFftChunks);

// ---- The engine end to end: tune, cache, warm process, policies -----------------------------
std::string TempCache(const char* tag) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("convt3d_gpu_" + std::string(tag) + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return (dir / "cache.sqlite").string();
}

// Options for an engine on `cache_path` with `policy`.
// Our kernels alone: these tests are about them (the weight packing, the families); the
// Arbitration tests below let cuDNN compete.
Options EngineOptions(const std::string& cache_path,
                      TunePolicy policy = TunePolicy::kTuneIfMissing) {
  Options o;
  o.cache_path = cache_path;
  o.policy = policy;
  o.vendor_candidates = false;
  return o;
}

// Strided in D and W, with groups, bias, padding and output_padding.
Problem EngineProblem() {
  return test::MakeProblem(2, 6, 4, {4, 5, 9}, {3, 2, 3})
      .Stride({2, 1, 2})
      .Padding({1, 0, 1})
      .OutputPadding({1, 0, 0})
      .Groups(2)
      .Bias();
}

// EngineProblem with 24 -> 40 channels in one group (the tensor-core families apply).
Problem WideEngineProblem() {
  Problem p = EngineProblem();
  p.c_in = 24;
  p.c_out = 40;
  p.groups = 1;
  return p;
}

// Runs the plan on the problem's data and returns the error against the CPU reference.
ref::ErrorStats RunPlan(const Plan& plan, const Problem& p, const Data& d) {
  auto dd = Upload(p, d);
  EXPECT_OK(dd);
  EXPECT_OK(dd->y.FillBytes(0xFF));
  EXPECT_OK(plan.Run(dd->x.get(), dd->w.get(), dd->b.get(), dd->y.get()));
  EXPECT_OK(rt::Synchronize());
  auto err = CompareOutput(p, *dd, d);
  EXPECT_OK(err);
  return err.ok() ? err.value() : ref::ErrorStats{INFINITY};
}

TEST(Engine, TuneStoresWinnerAndWarmProcessNeedsNoNvrtc) {
  REQUIRE_GPU();
  const std::string path = TempCache("warm");
  const Problem p = EngineProblem();
  const Data d = MakeData(p, 77);
  Options o = EngineOptions(path);
  o.repeats = 5;
  {
    ASSERT_OK_AND_ASSIGN(Engine engine, Engine::Create(o));
    ASSERT_OK_AND_ASSIGN(const Plan plan, engine.Plan(p));
    EXPECT_EQ(plan.source(), "tuned");
    EXPECT_GT(plan.tuned_ms(), 0);
    EXPECT_GT(engine.nvrtc_compiles(), 1);
    EXPECT_LE(RunPlan(plan, p, d).rel_l2, 1e-6);
  }
  auto store = cache::Store::Open(path);
  auto entries = store->List();
  ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ(entries->at(0).key.problem, p.Signature());
  // A new engine on the same file: a cache hit, with no NVRTC compile at all.
  ASSERT_OK_AND_ASSIGN(Engine engine, Engine::Create(o));
  ASSERT_OK_AND_ASSIGN(const Plan plan, engine.Plan(p));
  EXPECT_EQ(plan.source(), "cache");
  EXPECT_EQ(engine.nvrtc_compiles(), 0);
  EXPECT_EQ(plan.kernel_name(), entries->at(0).winner.candidate);
  EXPECT_LE(RunPlan(plan, p, d).rel_l2, 1e-6);
}

TEST(Engine, NeverPolicyUsesHeuristicAndWritesNoCache) {
  REQUIRE_GPU();
  const std::string path = TempCache("never");
  ASSERT_OK_AND_ASSIGN(Engine engine, Engine::Create(EngineOptions(path, TunePolicy::kNever)));
  const Problem p = EngineProblem();
  ASSERT_OK_AND_ASSIGN(const Plan plan, engine.Plan(p));
  EXPECT_EQ(plan.source(), "heuristic");
  EXPECT_EQ(plan.kernel_name(), gen::HeuristicPick(p).Name());
  EXPECT_LE(RunPlan(plan, p, MakeData(p, 78)).rel_l2, 1e-6);
  EXPECT_TRUE(cache::Store::Open(path)->List()->empty());
}

TEST(Engine, InvalidProblemLaunchesAndStoresNothing) {
  REQUIRE_GPU();
  const std::string path = TempCache("invalid");
  ASSERT_OK_AND_ASSIGN(Engine engine, Engine::Create(EngineOptions(path)));
  Problem p = EngineProblem();
  p.output_padding = {0, 0, 2};
  ASSERT_OK_AND_ASSIGN(rt::DeviceBuffer y, rt::DeviceBuffer::Alloc(4096));
  ASSERT_OK(y.FillBytes(0x5A));
  ASSERT_OK_AND_ASSIGN(const rt::DeviceBuffer x, rt::DeviceBuffer::Alloc(4096));
  EXPECT_THAT(engine.Forward(p, x.get(), x.get(), x.get(), y.get()),
              StatusIs(Code::kInvalidArgument, HasSubstr("output_padding[2]=2")));
  std::vector<unsigned char> host(4096);
  ASSERT_OK(y.Download(host.data(), host.size()));
  for (unsigned char c : host) ASSERT_EQ(c, 0x5A) << "the output was written";
  EXPECT_TRUE(cache::Store::Open(path)->List()->empty());
  EXPECT_EQ(engine.nvrtc_compiles(), 0);
}

TEST(Engine, TunesEachPrecisionWithinItsContract) {
  REQUIRE_GPU();
  ASSERT_OK_AND_ASSIGN(Engine engine, Engine::Create(EngineOptions(TempCache("prec"))));
  Problem p = WideEngineProblem();
  const Data d = MakeData(p, 91);
  for (Precision pr : {Precision::kFp32, Precision::kFp32x3, Precision::kTf32}) {
    p.precision = pr;
    ASSERT_OK_AND_ASSIGN(const Plan plan, engine.Plan(p));
    EXPECT_LE(plan.rel_err(), PrecisionTolerance(pr)) << plan.kernel_name();
    EXPECT_LE(RunPlan(plan, p, d).rel_l2, PrecisionTolerance(pr)) << plan.kernel_name();
  }
}

TEST(Engine, TunesHalfTensorsWithinTheirContract) {
  REQUIRE_GPU();
  ASSERT_OK_AND_ASSIGN(Engine engine, Engine::Create(EngineOptions(TempCache("half"))));
  Problem p = WideEngineProblem();
  p.in = {4, 5, 10};
  for (DType t : {DType::kBF16, DType::kF16}) {
    p.dtype = t;
    const Data d = MakeData(p, 92);
    ASSERT_OK_AND_ASSIGN(const Plan plan, engine.Plan(p));
    EXPECT_LE(plan.rel_err(), 1e-2) << plan.kernel_name();
    // Twice: the second Run re-lays the same weights into the same workspace.
    EXPECT_LE(RunPlan(plan, p, d).rel_l2, 1e-2) << plan.kernel_name();
    EXPECT_LE(RunPlan(plan, p, d).rel_l2, 1e-2) << plan.kernel_name();
  }
}

// ---- Weights packed once (Plan::Run with a weight version) ----------------------------------
// Heuristic plans of this GPU that have weight-only steps (on sm_90: igemm_mma in tf32, fp32x3
// and bf16, FFT and Winograd in strict fp32).
std::vector<std::pair<Problem, std::unique_ptr<Plan>>> PackingPlans(Engine& engine) {
  std::vector<Problem> tries;
  for (Precision pr : {Precision::kTf32, Precision::kFp32x3}) {
    Problem p = WideEngineProblem();
    p.precision = pr;
    tries.push_back(p);
  }
  Problem half = WideEngineProblem();
  half.in = {4, 5, 10};
  half.dtype = DType::kBF16;
  tries.push_back(half);
  // Stride 1 in strict fp32: FFT (3x3x3, 3x5x5) and Winograd (2x2x2) picks on sm_90.
  tries.push_back(test::MakeProblem(2, 16, 16, {6, 12, 12}, {3, 3, 3}).Bias());
  tries.push_back(test::MakeProblem(1, 16, 16, {4, 16, 16}, {3, 5, 5}));
  tries.push_back(test::MakeProblem(2, 32, 32, {8, 8, 8}, {2, 2, 2}).Bias());
  // A GAN-like layer in fp32x3 with the opt-in 3xFP16 tiles (last, from an engine with
  // Options::fp32x3_fp16): gemm_wgmma's 3xFP16 pick, whose weight-only steps also write the
  // weights' scale partials.
  Problem gan = test::MakeProblem(2, 128, 64, {4, 4, 4}, {4, 4, 4})
                    .Stride({2, 2, 2})
                    .Padding({1, 1, 1})
                    .Bias();
  gan.precision = Precision::kFp32x3;
  tries.push_back(gan);
  Options fp16_options = EngineOptions(":memory:", TunePolicy::kNever);
  fp16_options.fp32x3_fp16 = true;
  StatusOr<Engine> fp16_engine = Engine::Create(fp16_options);
  EXPECT_OK(fp16_engine.status());
  std::vector<std::pair<Problem, std::unique_ptr<Plan>>> out;
  for (size_t i = 0; i < tries.size(); ++i) {
    const Problem& p = tries[i];
    const bool fp16 = i + 1 == tries.size();
    if (fp16 && !fp16_engine.ok()) continue;
    auto plan = fp16 ? fp16_engine->Plan(p) : engine.Plan(p);
    EXPECT_OK(plan.status());
    if (!plan.ok()) continue;
    gen::DeviceLimits limits;
    limits.fp16_split = fp16;
    bool packs = false;
    for (const gen::Config& c : gen::Candidates(p, limits))
      if (c.Name() == plan->kernel_name())
        for (const gen::LaunchStep& s : gen::Launches(p, c).steps) packs |= s.weight_only;
    if (packs) out.emplace_back(p, std::make_unique<Plan>(std::move(plan).value()));
  }
  return out;
}

// The same x with other weights (and their reference).
Data OtherWeights(const Problem& p, const Data& d, uint64_t seed) {
  Data o = d;
  ref::FillRandom(o.w, seed);
  for (double& e : o.w) e = ref::RoundTo(p.dtype, e);
  o.ref = ref::ForwardGather(p, o.x.data(), o.w.data(), p.bias ? o.b.data() : nullptr);
  return o;
}

// Overwrites the device weights in place (same pointer) with d's.
Status UploadWeights(const Problem& p, const Data& d, rt::DeviceBuffer& w) {
  const auto bytes = ref::Narrow(p.dtype, d.w);
  return w.Upload(bytes.data(), bytes.size());
}

// Runs (versioned when `version` is set) on poisoned output; the error against `want`.
double RunAgainst(const Plan& plan, const Problem& p, DeviceData& dd, const rt::DeviceBuffer& w,
                  const Data& want, std::optional<uint64_t> version) {
  EXPECT_OK(dd.y.FillBytes(0xFF));
  const Status s = version
                       ? plan.Run(dd.x.get(), w.get(), dd.b.get(), dd.y.get(), nullptr, *version)
                       : plan.Run(dd.x.get(), w.get(), dd.b.get(), dd.y.get());
  EXPECT_OK(s);
  EXPECT_OK(rt::Synchronize());
  auto err = CompareOutput(p, dd, want);
  EXPECT_OK(err);
  return err.ok() ? err->rel_l2 : INFINITY;
}

TEST(Engine, WeightVersionPacksOnlyWhenPointerOrVersionChanges) {
  REQUIRE_GPU();
  ASSERT_OK_AND_ASSIGN(Engine engine,
                       Engine::Create(EngineOptions(":memory:", TunePolicy::kNever)));
  auto plans = PackingPlans(engine);
  ASSERT_GE(plans.size(), 2u) << "too few heuristic plans with weight-only steps on this GPU";
  for (auto& [p, plan] : plans) {
    SCOPED_TRACE(plan->kernel_name());
    const double tol = ToleranceOf(p);
    const Data d1 = MakeData(p, 300);
    const Data d2 = OtherWeights(p, d1, 301);
    ASSERT_OK_AND_ASSIGN(DeviceData dd, Upload(p, d1));
    EXPECT_LE(RunAgainst(*plan, p, dd, dd.w, d1, 1), tol);
    // Changed in place under the same version: undefined by contract. This implementation keeps
    // the weights packed by the last run, which is what shows that the pack was skipped.
    ASSERT_OK(UploadWeights(p, d2, dd.w));
    EXPECT_LE(RunAgainst(*plan, p, dd, dd.w, d1, 1), tol) << "the pack was not skipped";
    // A bumped version packs the new values.
    EXPECT_LE(RunAgainst(*plan, p, dd, dd.w, d2, 2), tol);
    // Without a version: always the current values; and the next versioned run re-packs even
    // with the version of before (the unversioned run replaced what was packed).
    ASSERT_OK(UploadWeights(p, d1, dd.w));
    EXPECT_LE(RunAgainst(*plan, p, dd, dd.w, d1, std::nullopt), tol);
    ASSERT_OK(UploadWeights(p, d2, dd.w));
    EXPECT_LE(RunAgainst(*plan, p, dd, dd.w, d2, std::nullopt), tol);
    ASSERT_OK(UploadWeights(p, d1, dd.w));
    EXPECT_LE(RunAgainst(*plan, p, dd, dd.w, d1, 2), tol);
    // Another pointer with the same version packs too.
    ASSERT_OK_AND_ASSIGN(DeviceData other, Upload(p, d2));
    EXPECT_LE(RunAgainst(*plan, p, dd, other.w, d2, 2), tol);
    EXPECT_LE(RunAgainst(*plan, p, dd, dd.w, d1, 2), tol);
  }
}

TEST(Engine, PlansOfOneShapeKeepTheirOwnPackedWeights) {
  REQUIRE_GPU();
  ASSERT_OK_AND_ASSIGN(Engine engine,
                       Engine::Create(EngineOptions(":memory:", TunePolicy::kNever)));
  auto plans = PackingPlans(engine);
  ASSERT_FALSE(plans.empty());
  const Problem& p = plans[0].first;
  ASSERT_OK_AND_ASSIGN(const Plan a, engine.Plan(p));
  ASSERT_OK_AND_ASSIGN(const Plan b, engine.Plan(p));
  const Data d1 = MakeData(p, 310);
  const Data d2 = OtherWeights(p, d1, 311);
  ASSERT_OK_AND_ASSIGN(DeviceData dd1, Upload(p, d1));
  ASSERT_OK_AND_ASSIGN(DeviceData dd2, Upload(p, d2));
  for (int round = 0; round < 2; ++round) {  // interleaved, each with its own fixed version
    EXPECT_LE(RunAgainst(a, p, dd1, dd1.w, d1, 5), ToleranceOf(p)) << a.kernel_name();
    EXPECT_LE(RunAgainst(b, p, dd1, dd2.w, d2, 5), ToleranceOf(p)) << b.kernel_name();
  }
}

TEST(Engine, GraphCaptureAlwaysPacksAndTheCapturedPlanPacksFromThenOn) {
  REQUIRE_GPU();
  ASSERT_OK_AND_ASSIGN(Engine engine,
                       Engine::Create(EngineOptions(":memory:", TunePolicy::kNever)));
  auto plans = PackingPlans(engine);
  ASSERT_FALSE(plans.empty());
  const Problem& p = plans[0].first;
  const Plan& plan = *plans[0].second;
  SCOPED_TRACE(plan.kernel_name());
  const double tol = ToleranceOf(p);
  const Data d1 = MakeData(p, 320);
  const Data d2 = OtherWeights(p, d1, 321);
  ASSERT_OK_AND_ASSIGN(DeviceData dd, Upload(p, d1));
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto* st = reinterpret_cast<CUstream_st*>(s);
  auto run = [&] { return plan.Run(dd.x.get(), dd.w.get(), dd.b.get(), dd.y.get(), st, 9); };
  ASSERT_OK(run());  // packed eagerly with version 9
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  // Captured with the same pointer and version: the graph must still hold the pack.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status captured = run();
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_OK(captured);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  // New values in place, same version: each replay packs them.
  ASSERT_OK(UploadWeights(p, d2, dd.w));
  ASSERT_OK(dd.y.FillBytes(0xFF));
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  auto err = CompareOutput(p, dd, d2);
  ASSERT_OK(err);
  EXPECT_LE(err->rel_l2, tol) << "a replay used the weights packed before capture";
  // The replay rewrote the workspace: eager runs of this plan now pack every time, whatever
  // the version says.
  ASSERT_OK(UploadWeights(p, d1, dd.w));
  ASSERT_OK(dd.y.FillBytes(0xFF));
  ASSERT_OK(run());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  err = CompareOutput(p, dd, d1);
  ASSERT_OK(err);
  EXPECT_LE(err->rel_l2, tol);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(Engine, RunRejectsMissingBias) {
  REQUIRE_GPU();
  ASSERT_OK_AND_ASSIGN(Engine engine,
                       Engine::Create(EngineOptions(":memory:", TunePolicy::kNever)));
  ASSERT_OK_AND_ASSIGN(const Plan plan, engine.Plan(EngineProblem()));
  ASSERT_OK_AND_ASSIGN(const rt::DeviceBuffer x, rt::DeviceBuffer::Alloc(4096));
  EXPECT_THAT(plan.Run(x.get(), x.get(), nullptr, x.get()),
              StatusIs(Code::kInvalidArgument, HasSubstr("bias")));
}

// ---- Vendor arbitration (cuDNN as a tuning candidate) ----------------------------------------

// The cuDNN handle of the tests' context, or null with the reason (no GPU, no cuDNN).
std::shared_ptr<cudnn::Handle> CudnnHandle(std::string* why) {
  static std::string reason;
  static const std::shared_ptr<cudnn::Handle> handle = [] {
    if (!NoGpuReason().empty()) {
      reason = "no GPU: " + NoGpuReason();
      return std::shared_ptr<cudnn::Handle>();
    }
    auto lib = cudnn::Library::Load();
    if (!lib.ok()) {
      reason = "no cuDNN: " + lib.status().message();
      return std::shared_ptr<cudnn::Handle>();
    }
    auto h = cudnn::Handle::Create(lib.value());
    if (!h.ok()) reason = "cuDNN unusable: " + h.status().message();
    return h.ok() ? h.value() : std::shared_ptr<cudnn::Handle>();
  }();
  (void)NoGpuReason();  // the context current on this thread
  *why = reason;
  return handle;
}

#define REQUIRE_CUDNN(handle)               \
  std::string why_no_cudnn;                 \
  auto handle = CudnnHandle(&why_no_cudnn); \
  if (!handle) GTEST_SKIP() << why_no_cudnn

// The engine's key of p with arbitration on (what Engine::Plan looks up).
cache::Key ArbitratedKey(const Problem& p, const cudnn::Library& lib) {
  const Environment env = DescribeEnvironment();
  return {p.Signature(),     env.arch,
          env.gpu_name,      env.driver_version,
          env.nvrtc_version, env.code_hash + vendor::KeyTag(static_cast<int64_t>(lib.version()))};
}

// Problems cuDNN can express: groups, bias, output_padding < stride, dilation, padding.
std::vector<Problem> ArbitrationProblems() {
  return {EngineProblem(), WideEngineProblem(),
          test::MakeProblem(2, 16, 8, {5, 6, 7}, {3, 3, 3}).Dilation({2, 1, 1}).Padding({2, 1, 1})};
}

// Every cuDNN algorithm offered in each mode runs; those that pass the tuner's gate bound (the
// precision's tolerance against fp64) are the ones arbitration may pick, and there is at least
// one per mode. fp32 and fp32x3 run FMA math only (no TF32).
TEST(Arbitration, CudnnCandidatesMeetEachPrecisionsContract) {
  REQUIRE_CUDNN(handle);
  for (const Problem& base : ArbitrationProblems()) {
    for (int m = 0; m < 5; ++m) {
      Problem p = base;
      test::SetMode(p, m);
      const std::string where = p.Signature();
      std::vector<CandidateKernels> candidates = tuner::VendorCandidates(handle, p);
      ASSERT_FALSE(candidates.empty()) << where << ": cuDNN offers no algorithm";
      const Data d = MakeData(p, 300 + m);
      int passed = 0;
      for (const CandidateKernels& k : candidates) {
        if (p.dtype == DType::kF32 && p.precision != Precision::kTf32) {
          EXPECT_EQ(k.vendor->math_name(), "FMA_MATH") << where << " " << k.Name();
        }
        ASSERT_OK_AND_ASSIGN(DeviceData dd, Upload(p, d));
        rt::DeviceBuffer ws;
        if (k.workspace_bytes() > 0) {
          ASSERT_OK_AND_ASSIGN(ws, rt::DeviceBuffer::Alloc(k.workspace_bytes()));
        }
        ASSERT_OK(dd.y.FillBytes(0xFF));
        const Status run = k.Launch(dd.x.get(), dd.w.get(), p.bias ? dd.b.get() : nullptr,
                                    dd.y.get(), ws.get(), nullptr);
        if (!run.ok()) {  // the tuner records it as launch_failed and goes on
          std::printf("  %s %s: %s\n", where.c_str(), k.Name().c_str(), run.message().c_str());
          continue;
        }
        ASSERT_OK(rt::Synchronize());
        ASSERT_OK_AND_ASSIGN(const ref::ErrorStats err, CompareOutput(p, dd, d));
        EXPECT_EQ(err.nonfinite, 0) << where << " " << k.Name();
        if (err.rel_l2 <= ToleranceOf(p)) ++passed;
        std::printf("  %s %s %s: rel_l2 %.2e (bound %.0e)\n", where.c_str(), k.Name().c_str(),
                    k.vendor->math_name().c_str(), err.rel_l2, ToleranceOf(p));
      }
      EXPECT_GT(passed, 0) << where << ": no cuDNN algorithm meets the contract";
    }
  }
}

// Tuning with arbitration gates and times cuDNN's algorithms beside ours, records them in the
// trial log, and whatever wins runs within the contract; the entry is under the tagged key.
TEST(Arbitration, TuningRecordsCudnnTrialsUnderTheTaggedKey) {
  REQUIRE_CUDNN(handle);
  const std::string path = TempCache("arb_tune");
  Options o = EngineOptions(path);
  o.vendor_candidates = true;
  o.max_candidates = 4;
  o.repeats = 5;
  const Problem p = EngineProblem();
  ASSERT_OK_AND_ASSIGN(Engine engine, Engine::Create(o));
  ASSERT_OK_AND_ASSIGN(const Plan plan, engine.Plan(p));
  EXPECT_LE(RunPlan(plan, p, MakeData(p, 311)).rel_l2, ToleranceOf(p)) << plan.kernel_name();
  auto store = cache::Store::Open(path);
  const cache::Key key = ArbitratedKey(p, handle->library());
  ASSERT_OK_AND_ASSIGN(auto winner, store->Lookup(key));
  ASSERT_TRUE(winner.has_value()) << "no entry under " << key.code_hash;
  EXPECT_EQ(winner->candidate, plan.kernel_name());
  ASSERT_OK_AND_ASSIGN(auto trials, store->Trials(key));
  int cudnn_ok = 0;
  for (const cache::Trial& t : trials)
    if (t.candidate.rfind("cudnn:", 0) == 0 && t.outcome == "ok") ++cudnn_ok;
  EXPECT_GT(cudnn_ok, 0);
  std::printf("  winner %s (%d cuDNN trials passed)\n", plan.kernel_name().c_str(), cudnn_ok);
}

// A plan whose cached winner is cuDNN runs cuDNN, on the caller's (non-default) stream, with its
// own workspace, correctly; a second plan of the shape runs beside it on another stream.
TEST(Arbitration, CudnnPlanRunsOnTheCallersStream) {
  REQUIRE_CUDNN(handle);
  const std::string path = TempCache("arb_stream");
  for (int m : {0, 1, 3}) {
    Problem p = EngineProblem();
    test::SetMode(p, m);
    std::vector<CandidateKernels> candidates = tuner::VendorCandidates(handle, p);
    ASSERT_FALSE(candidates.empty());
    // The lowest-numbered algorithm offered (ALGO_0 or ALGO_1: no FFT or Winograd).
    const vendor::CudnnChoice choice = vendor::ChoiceOf(*candidates.front().vendor);
    ASSERT_OK(cache::Store::Open(path)->Record(ArbitratedKey(p, handle->library()),
                                               choice.AsWinner(1, 1e-7), {}));
    Options o = EngineOptions(path, TunePolicy::kCacheOrHeuristic);
    o.vendor_candidates = true;
    ASSERT_OK_AND_ASSIGN(Engine engine, Engine::Create(o));
    ASSERT_OK_AND_ASSIGN(const Plan a, engine.Plan(p));
    ASSERT_OK_AND_ASSIGN(const Plan b, engine.Plan(p));
    EXPECT_EQ(a.kernel_name(), choice.Name());
    EXPECT_EQ(a.origin().tier, 1) << a.origin().reason;
    EXPECT_EQ(engine.nvrtc_compiles(), 0);
    const Data d = MakeData(p, 320 + m);
    ASSERT_OK_AND_ASSIGN(DeviceData da, Upload(p, d));
    ASSERT_OK_AND_ASSIGN(DeviceData db, Upload(p, d));
    ASSERT_OK(da.y.FillBytes(0xFF));
    ASSERT_OK(db.y.FillBytes(0xFF));
    cudaStream_t s1 = nullptr, s2 = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
    for (int i = 0; i < 3; ++i) {
      ASSERT_OK(a.Run(da.x.get(), da.w.get(), da.b.get(), da.y.get(), s1));
      ASSERT_OK(b.Run(db.x.get(), db.w.get(), db.b.get(), db.y.get(), s2));
    }
    ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    for (const DeviceData* dd : {&da, &db}) {
      ASSERT_OK_AND_ASSIGN(const ref::ErrorStats err, CompareOutput(p, *dd, d));
      EXPECT_EQ(err.nonfinite, 0) << p.Signature();
      EXPECT_LE(err.rel_l2, ToleranceOf(p)) << p.Signature() << " " << a.kernel_name();
    }
  }
}

// A cached cuDNN winner that cannot run here (another cuDNN version; or an engine without
// arbitration meeting one, e.g. imported) is passed over for the next tier, never a failure.
TEST(Arbitration, UnusableCudnnEntryFallsBackToTheNextTier) {
  REQUIRE_CUDNN(handle);
  const std::string path = TempCache("arb_fallback");
  const Problem p = EngineProblem();
  vendor::CudnnChoice stale;
  stale.algo = 0;
  stale.math = "FMA_MATH";
  stale.cudnn_version = 1;  // no such cuDNN
  const cache::Winner w = stale.AsWinner(1, 1e-7);
  cache::Key plain = ArbitratedKey(p, handle->library());
  plain.code_hash = DescribeEnvironment().code_hash;
  {
    auto store = cache::Store::Open(path);
    ASSERT_OK(store->Record(ArbitratedKey(p, handle->library()), w, {}));
    ASSERT_OK(store->Record(plain, w, {}));
  }
  for (bool arbitrate : {true, false}) {
    Options o = EngineOptions(path, TunePolicy::kCacheOrHeuristic);
    o.vendor_candidates = arbitrate;
    ASSERT_OK_AND_ASSIGN(Engine engine, Engine::Create(o));
    ASSERT_OK_AND_ASSIGN(const Plan plan, engine.Plan(p));
    EXPECT_EQ(plan.origin().tier, 5) << plan.origin().reason;
    EXPECT_THAT(plan.origin().reason, HasSubstr("entry unusable"));
    EXPECT_EQ(plan.kernel_name().find("cudnn"), std::string::npos);
    EXPECT_LE(RunPlan(plan, p, MakeData(p, 330)).rel_l2, ToleranceOf(p));
  }
}

}  // namespace
}  // namespace convt3d
