// test_tiers.cpp: the lookup tiers without a GPU: signatures, distance, Find over real caches,
// notes, the simulated one-family code change, and `convt3d cache explain`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "cache_test_util.h"
#include "cli_helpers.h"
#include "generator/candidates.h"
#include "generator/source.h"
#include "src/key_tags.h"
#include "src/tiers.h"
#include "src/tuner.h"
#include "src/vendor.h"
#include "status_matchers.h"
#include "temp_dir.h"
#include "test_util.h"

namespace convt3d {
namespace {

using test::IsOk;
using test::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

Problem Small() {
  Problem p;
  p.n = 2, p.c_in = 8, p.c_out = 8, p.in = {6, 6, 6};
  p.kernel = {3, 3, 3}, p.stride = {2, 2, 2}, p.padding = {1, 1, 1};
  return p;
}

// The current machine of the tests: an H100 under "new" code.
cache::Key Here(const Problem& p) {
  cache::Key k = cache::MakeKey(p.Signature());
  k.gpu_name = "NVIDIA H100 80GB HBM3";
  k.code_hash = "new";
  return k;
}

cache::Winner WinnerOf(const gen::Config& c, int seed) {
  cache::Winner w;
  w.candidate = w.kernel_symbol = c.Name();
  w.params_json = c.ToJson();
  w.cubin = cache::MakeCubin(seed);
  w.median_ms = 0.5;
  w.rel_err = 1e-7;
  return w;
}

// The first candidate of p, and the first of another family.
std::pair<gen::Config, gen::Config> TwoFamilies(const Problem& p) {
  const auto all = gen::Candidates(p);
  gen::Config a = all.front(), b = all.front();
  for (const auto& c : all)
    if (c.family != a.family) {
      b = c;
      break;
    }
  return {a, b};
}

std::vector<int> TiersOf(const tiers::Found& f) {
  std::vector<int> out;
  for (const auto& o : f.options) out.push_back(static_cast<int>(o.tier));
  return out;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

using test::ScopedEnv;

TEST(Signature, ParsesWhatSignatureWrites) {
  auto p = tiers::ParseSignature(
      "f32_tf32_n16_ci32_co64_i16x32x8_k3x5x7_s2x1x2_p1x0x2_op1x0x0_d2x1x1_g4_b1");
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_EQ(p->dtype, DType::kF32);
  EXPECT_EQ(p->precision, Precision::kTf32);
  EXPECT_EQ(p->n, 16);
  EXPECT_EQ(p->c_in, 32);
  EXPECT_EQ(p->c_out, 64);
  EXPECT_EQ(p->in, (Dim3{16, 32, 8}));
  EXPECT_EQ(p->kernel, (Dim3{3, 5, 7}));
  EXPECT_EQ(p->stride, (Dim3{2, 1, 2}));
  EXPECT_EQ(p->padding, (Dim3{1, 0, 2}));
  EXPECT_EQ(p->output_padding, (Dim3{1, 0, 0}));
  EXPECT_EQ(p->dilation, (Dim3{2, 1, 1}));
  EXPECT_EQ(p->groups, 4);
  EXPECT_TRUE(p->bias);
  auto h =
      tiers::ParseSignature("bf16_n1_ci2_co3_i4x5x6_k1x1x1_s1x1x1_p0x0x0_op0x0x0_d1x1x1_g1_b0");
  ASSERT_THAT(h.status(), IsOk());
  EXPECT_EQ(h->dtype, DType::kBF16);
  EXPECT_EQ(h->precision, Precision::kFp32);
  EXPECT_EQ(h->c_out, 3);
}

TEST(Signature, RefusesWhatDoesNotRead) {
  for (const char* bad :
       {"", "f32", "f33_n1_ci1_co1_i1x1x1_k1x1x1_s1x1x1_p0x0x0_op0x0x0_d1x1x1_g1_b0",
        "f32_n1_ci1_co1_i1x1_k1x1x1_s1x1x1_p0x0x0_op0x0x0_d1x1x1_g1_b0",
        "f32_n1_ci1_co1_i1x1x1_k1x1x1_s1x1x1_p0x0x0_op0x0x0_d1x1x1_g1_b2",
        "f32_n1_ci1_co1_i1x1x1_k1x1x1_s1x1x1_p0x0x0_op0x0x0_d1x1x1_g1_b0_x",
        "f32_n01_ci1_co1_i1x1x1_k1x1x1_s1x1x1_p0x0x0_op0x0x0_d1x1x1_g1_b0",
        "f32_n-1_ci1_co1_i1x1x1_k1x1x1_s1x1x1_p0x0x0_op0x0x0_d1x1x1_g1_b0"})
    EXPECT_THAT(tiers::ParseSignature(bad).status(), StatusIs(Code::kInvalidArgument)) << bad;
}

TEST(Distance, LogRatiosPlusOnePerOtherPadding) {
  const Problem a = Small();
  EXPECT_EQ(tiers::ShapeDistance(a, a), 0.0);
  Problem b = a;
  b.n = 4;           // ln 2
  b.in[1] = 3;       // ln 2
  b.c_out = 2;       // ln 4
  b.padding[0] = 0;  // +1
  b.bias = true;     // +1
  EXPECT_NEAR(tiers::ShapeDistance(a, b), 4 * std::log(2.0) + 2, 1e-12);
  EXPECT_NEAR(tiers::ShapeDistance(b, a), 4 * std::log(2.0) + 2, 1e-12);
}

TEST(Distance, SameClassNeedsKernelStrideDilationGroupsDtypePrecision) {
  const Problem a = Small();
  Problem b = a;
  b.n = 7, b.c_in = 3, b.in = {9, 9, 9}, b.padding = {0, 0, 0};
  EXPECT_TRUE(tiers::SameClass(a, b));
  for (int i = 0; i < 5; ++i) {
    Problem c = a;
    if (i == 0) c.kernel[2] = 5;
    if (i == 1) c.stride[0] = 1;
    if (i == 2) c.dilation[1] = 2;
    if (i == 3) c.precision = Precision::kTf32;
    if (i == 4) c.dtype = DType::kBF16;
    EXPECT_FALSE(tiers::SameClass(a, c)) << i;
  }
}

TEST(Rule, WhatEachPolicyTakesRecordsAndTunesInTheBackground) {
  using tiers::Tier;
  const Tier all[] = {Tier::kExact, Tier::kSameGpu, Tier::kSameArch, Tier::kNearest,
                      Tier::kHeuristic};
  // serve, record, background per tier 1..5 (the table of tiers.h).
  struct Row {
    TunePolicy policy;
    const char* serve;
    const char* record;
    const char* background;
  };
  const Row rows[] = {
      {TunePolicy::kNever, "....s", ".....", "....."},
      {TunePolicy::kCacheOrHeuristic, "sssss", ".rr..", "....."},
      {TunePolicy::kTuneIfMissing, "sss..", ".rr..", "....."},
      {TunePolicy::kExhaustive, ".....", ".....", "....."},
      {TunePolicy::kBackground, "sssss", ".r...", "..bbb"},
  };
  for (const Row& r : rows) {
    for (int i = 0; i < 5; ++i) {
      const tiers::Rule got = tiers::RuleFor(r.policy, all[i]);
      EXPECT_EQ(got.serve, r.serve[i] != '.') << static_cast<int>(r.policy) << " tier " << i + 1;
      EXPECT_EQ(got.record, r.record[i] != '.') << static_cast<int>(r.policy) << " tier " << i + 1;
      EXPECT_EQ(got.background, r.background[i] != '.')
          << static_cast<int>(r.policy) << " tier " << i + 1;
    }
  }
}

class TiersTest : public test::TempDirTest {};

TEST_F(TiersTest, NotesAreStoredWithTheEntryAndDroppedByAPlainRecord) {
  auto store = cache::Store::Open(Path());
  const cache::Key k = cache::MakeKey();
  ASSERT_THAT(store->ReadNote(k), IsOk());
  EXPECT_FALSE(store->ReadNote(k).value().has_value());  // no notes table yet
  ASSERT_THAT(store->Record(k, cache::MakeWinner(1), {}, cache::Note{"tuned", "abc"}), IsOk());
  auto note = store->ReadNote(k);
  ASSERT_THAT(note.status(), IsOk());
  ASSERT_TRUE(note.value().has_value());
  EXPECT_EQ(note.value()->origin, "tuned");
  EXPECT_EQ(note.value()->source_hash, "abc");
  ASSERT_THAT(store->Record(k, cache::MakeWinner(2), {}), IsOk());
  EXPECT_FALSE(store->ReadNote(k).value().has_value());
  EXPECT_THAT(store->Record(k, cache::MakeWinner(3), {}, cache::Note{"bad\n", ""}),
              StatusIs(Code::kInvalidArgument, HasSubstr("printable")));
  // The schema is unchanged: an export still says version 1 and a read-only view reads notes.
  ASSERT_THAT(store->Record(k, cache::MakeWinner(4), {}, cache::Note{"tier 2", "def"}), IsOk());
  auto json = store->ExportJson();
  ASSERT_THAT(json.status(), IsOk());
  EXPECT_THAT(json.value(), HasSubstr("\"schema_version\": 1"));
  EXPECT_THAT(json.value(), Not(HasSubstr("tier 2")));  // notes stay out of exports
  store.reset();
  auto ro = cache::Store::OpenReadOnly(Path());
  auto again = ro->ReadNote(k);
  ASSERT_THAT(again.status(), IsOk());
  ASSERT_TRUE(again.value().has_value());
  EXPECT_EQ(again.value()->source_hash, "def");
}

TEST_F(TiersTest, FindOrdersTiersAndSaysWhyEntriesMiss) {
  const Problem p = Small();
  const auto [a, b] = TwoFamilies(p);
  ASSERT_NE(a.family, b.family);
  const cache::Key here = Here(p);
  auto store = cache::Store::Open(Path());
  // Tier 2: same GPU, older code, the winner's source unchanged.
  cache::Key old = here;
  old.code_hash = "old";
  ASSERT_THAT(store->Record(old, WinnerOf(b, 1), {}, {"tuned", gen::SourceHash(p, b)}), IsOk());
  // Same GPU, other driver, but its winner's source was different then: refused.
  cache::Key changed = here;
  changed.driver_version = 12080;
  ASSERT_THAT(store->Record(changed, WinnerOf(a, 2), {}, {"tuned", "0000000000000000"}), IsOk());
  // Tier 3: another GPU model of sm_90, no note (source unknown: taken).
  cache::Key other_gpu = here;
  other_gpu.gpu_name = "NVIDIA H200";
  ASSERT_THAT(store->Record(other_gpu, WinnerOf(a, 3), {}), IsOk());
  // Tier 4: a shape with twice the batch (distance ln 2) and one 8x farther (ln 8).
  Problem near = p, far = p;
  near.n = 4;
  far.n = 16;
  const auto near_c = gen::Candidates(near).front();
  ASSERT_THAT(store->Record(cache::MakeKey(near.Signature()), WinnerOf(near_c, 4), {}), IsOk());
  ASSERT_THAT(
      store->Record(cache::MakeKey(far.Signature()), WinnerOf(gen::Candidates(far).front(), 5), {}),
      IsOk());
  // Ignored: another kernel size; another architecture; a winner that is no configuration.
  Problem k5 = p;
  k5.kernel = {5, 5, 5};
  ASSERT_THAT(
      store->Record(cache::MakeKey(k5.Signature()), WinnerOf(gen::Candidates(k5).front(), 6), {}),
      IsOk());
  cache::Key ampere = here;
  ampere.arch = "sm_80";
  ASSERT_THAT(store->Record(ampere, WinnerOf(a, 7), {}), IsOk());
  cache::Key junk = here;
  junk.nvrtc_version = 12000;
  ASSERT_THAT(store->Record(junk, cache::MakeWinner(8), {}), IsOk());

  auto found = tiers::Find({store.get()}, here, p, gen::DeviceLimits{}, 2);
  ASSERT_THAT(found.status(), IsOk());
  EXPECT_THAT(TiersOf(*found), ElementsAre(2, 3, 4, 4));
  EXPECT_EQ(found->options[0].key, old);
  EXPECT_EQ(found->options[0].winner.candidate, b.Name());
  EXPECT_EQ(found->options[1].key, other_gpu);
  EXPECT_EQ(found->options[2].key.problem, near.Signature());
  EXPECT_NEAR(found->options[2].distance, std::log(2.0), 1e-12);
  EXPECT_NEAR(found->options[3].distance, std::log(8.0), 1e-12);
  const std::string missed = Joined(found->missed);
  EXPECT_THAT(missed, HasSubstr("tier 1 exact: no entry for this exact key"));
  EXPECT_THAT(missed, HasSubstr("kernel source changed since tuning"));
  EXPECT_THAT(missed, HasSubstr("driver 12080"));
  EXPECT_THAT(missed, HasSubstr("is not a candidate of this build"));
  EXPECT_THAT(missed, Not(HasSubstr("sm_80")));

  // The exact entry comes first once there is one; max_nearest cuts tier 4.
  ASSERT_THAT(store->Record(here, WinnerOf(a, 9), {}), IsOk());
  auto again = tiers::Find({store.get()}, here, p, gen::DeviceLimits{}, 1);
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_THAT(TiersOf(*again), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(again->options[0].what, Not(HasSubstr("recorded by")));  // no note
  ASSERT_THAT(store->Record(here, WinnerOf(a, 10), {}, {"tier 2 same_gpu from X", ""}), IsOk());
  auto noted = tiers::Find({store.get()}, here, p, gen::DeviceLimits{}, 1);
  ASSERT_THAT(noted.status(), IsOk());
  EXPECT_THAT(noted->options[0].what, HasSubstr("recorded by tier 2 same_gpu from X"));
}

TEST_F(TiersTest, NearestSkipsWinnersThatAreNoCandidateHere) {
  const Problem p = Small();
  Problem wide = p;
  wide.c_in = 256,
  wide.c_out = 256;  // its winner may not apply to 8 channels: only valid ones count
  auto store = cache::Store::Open(Path());
  std::vector<std::string> valid_here;
  for (const auto& c : gen::Candidates(p)) valid_here.push_back(c.Name());
  int stored_valid = 0;
  for (const auto& c : gen::Candidates(wide)) {
    cache::Key k = cache::MakeKey(wide.Signature());
    k.code_hash = c.Name();  // one entry per configuration
    ASSERT_THAT(store->Record(k, WinnerOf(c, 1), {}), IsOk());
    stored_valid += std::count(valid_here.begin(), valid_here.end(), c.Name()) > 0;
  }
  auto found = tiers::Find({store.get()}, Here(p), p, gen::DeviceLimits{}, 1000);
  ASSERT_THAT(found.status(), IsOk());
  EXPECT_EQ(static_cast<int>(found->options.size()), stored_valid);
  for (const auto& o : found->options)
    EXPECT_NE(std::find(valid_here.begin(), valid_here.end(), o.winner.candidate),
              valid_here.end());
}

// Tiers 2-4 rebuild winners from their params_json: listing reads no cubin, so a damaged cubin
// (which List and Lookup refuse) does not keep the entry's configuration from tier 2.
TEST_F(TiersTest, ListArchReadsNoCubinAndTierTwoSurvivesADamagedOne) {
  const Problem p = Small();
  const auto [a, b] = TwoFamilies(p);
  cache::Key old = Here(p);
  old.code_hash = "old";
  cache::Key ampere = old;
  ampere.arch = "sm_80";
  {
    auto store = cache::Store::Open(Path());
    ASSERT_THAT(store->Record(old, WinnerOf(b, 1), {}), IsOk());
    ASSERT_THAT(store->Record(ampere, WinnerOf(b, 2), {}), IsOk());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(Path().c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE binaries SET cubin = x'00'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = cache::Store::Open(Path());
  auto all = store->List();
  ASSERT_THAT(all.status(), IsOk());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_THAT(all->at(0).damage, HasSubstr("cubin"));
  auto listed = store->ListArch("sm_90");
  ASSERT_THAT(listed.status(), IsOk());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->at(0).key, old);
  EXPECT_EQ(listed->at(0).damage, "");
  EXPECT_EQ(listed->at(0).cubin_bytes, 0);
  EXPECT_EQ(listed->at(0).winner.params_json, b.ToJson());
  auto found = tiers::Find({store.get()}, Here(p), p, gen::DeviceLimits{}, 1);
  ASSERT_THAT(found.status(), IsOk());
  ASSERT_THAT(TiersOf(*found), ElementsAre(2));
  EXPECT_EQ(found->options[0].winner.candidate, b.Name());
}

TEST_F(TiersTest, SharedLayersAreSearchedToo) {
  const Problem p = Small();
  const auto [a, b] = TwoFamilies(p);
  cache::Key old = Here(p);
  old.code_hash = "old";
  {
    auto team = cache::Store::Open(Path("team.sqlite"));
    ASSERT_THAT(team->Record(old, WinnerOf(a, 1), {}), IsOk());
  }
  auto user = cache::Store::Open(Path());
  auto team = cache::Store::OpenReadOnly(Path("team.sqlite"));
  auto found = tiers::Find({user.get(), team.get()}, Here(p), p, gen::DeviceLimits{}, 1);
  ASSERT_THAT(found.status(), IsOk());
  ASSERT_THAT(TiersOf(*found), ElementsAre(2));
  EXPECT_EQ(found->options[0].layer, Path("team.sqlite"));
}

// The target without a GPU: after a change to one family's template (the test hook),
// the code hash moves (tier 1 misses), the other family's winner is still offered as tier 2,
// and the changed family's winner is refused there.
TEST_F(TiersTest, OneFamilyChangedLeavesOtherFamiliesOnTierTwo) {
  const Problem p = Small();
  const auto [a, b] = TwoFamilies(p);
  const std::string hash_before = gen::CodeHash();
  const std::string a_before = gen::SourceHash(p, a), b_before = gen::SourceHash(p, b);
  ASSERT_FALSE(a_before.empty());
  cache::Key tuned_then = Here(p);
  tuned_then.code_hash = hash_before;
  Problem q = p;  // a second problem, whose winner is of the changed family
  q.n = 3;
  cache::Key q_then = Here(q);
  q_then.code_hash = hash_before;
  auto store = cache::Store::Open(Path());
  ASSERT_THAT(store->Record(tuned_then, WinnerOf(b, 1), {}, {"tuned", b_before}), IsOk());
  gen::Config qa = b;
  for (const auto& c : gen::Candidates(q))
    if (c.family == a.family) {
      qa = c;
      break;
    }
  ASSERT_EQ(qa.family, a.family);
  ASSERT_THAT(store->Record(q_then, WinnerOf(qa, 2), {}, {"tuned", gen::SourceHash(q, qa)}),
              IsOk());

  ScopedEnv alter("CONVT3D_TEST_ALTER_FAMILY", std::string(a.family).c_str());
  EXPECT_NE(gen::CodeHash(), hash_before);
  EXPECT_NE(gen::SourceHash(p, a), a_before);
  EXPECT_EQ(gen::SourceHash(p, b), b_before);
  cache::Key now = Here(p);
  now.code_hash = gen::CodeHash();
  auto found = tiers::Find({store.get()}, now, p, gen::DeviceLimits{}, 1);
  ASSERT_THAT(found.status(), IsOk());
  ASSERT_FALSE(found->options.empty());
  EXPECT_EQ(found->options[0].tier, tiers::Tier::kSameGpu);
  EXPECT_EQ(found->options[0].winner.candidate, b.Name());

  cache::Key q_now = Here(q);
  q_now.code_hash = gen::CodeHash();
  auto q_found = tiers::Find({store.get()}, q_now, q, gen::DeviceLimits{}, 1);
  ASSERT_THAT(q_found.status(), IsOk());
  for (const auto& o : q_found->options) EXPECT_NE(o.tier, tiers::Tier::kSameGpu);
  EXPECT_THAT(Joined(q_found->missed), HasSubstr("kernel source changed since tuning"));
}

// ---- fp32x3's 3xFP16 opt-in: its own key tag (src/key_tags.h) ------------------------------

// A GAN-like layer whose first candidate with the opt-in is a 3xFP16 tile.
Problem GanFp32x3() {
  Problem p =
      test::MakeProblem(2, 128, 64, {4, 4, 4}, {4, 4, 4}).Stride({2, 2, 2}).Padding({1, 1, 1});
  p.precision = Precision::kFp32x3;
  return p;
}

// The opt-in tags the key of f32 fp32x3 problems only, after the vendor tag: every other key,
// and so every entry stored before the tag existed, stays as it was.
TEST(KeyTags, TheFp16SplitTagMarksFp32x3KeysOnly) {
  const std::string h = "0123456789abcdef", cudnn = "+cudnn91900";
  Problem p = Small();
  p.precision = Precision::kFp32x3;
  EXPECT_EQ(keytag::KeyCodeHash(h, "", p, false), h);
  EXPECT_EQ(keytag::KeyCodeHash(h, "", p, true), h + "+f16split");
  EXPECT_EQ(keytag::KeyCodeHash(h, cudnn, p, false), h + cudnn);
  EXPECT_EQ(keytag::KeyCodeHash(h, cudnn, p, true), h + cudnn + "+f16split");
  EXPECT_EQ(vendor::TagOf(keytag::KeyCodeHash(h, cudnn, p, true)), cudnn + "+f16split");
  EXPECT_TRUE(keytag::HasFp16Split(keytag::KeyCodeHash(h, cudnn, p, true)));
  EXPECT_EQ(keytag::WithoutFp16Split(keytag::KeyCodeHash(h, cudnn, p, true)), h + cudnn);
  EXPECT_FALSE(keytag::HasFp16Split(h + cudnn));
  EXPECT_FALSE(keytag::HasFp16Split("+f16split"));  // a tag alone is no code hash
  for (int mode = 0; mode < 5; ++mode) {
    if (mode == 2) continue;  // fp32x3 on f32: above
    Problem q = Small();
    test::SetMode(q, mode);
    for (const std::string& tag : {std::string(), cudnn})
      EXPECT_EQ(keytag::KeyCodeHash(h, tag, q, true), keytag::KeyCodeHash(h, tag, q, false))
          << q.Signature();
  }
  Problem f64 = p;
  f64.dtype = DType::kF64;
  EXPECT_EQ(keytag::KeyCodeHash(h, "", f64, true), h);
}

// Options::fp32x3_fp16 (or a CLI flag) opts in, and so does $CONVT3D_FP32X3_FP16=1 alone.
TEST(KeyTags, TheOptionOrTheVariableOptsIn) {
  {
    ScopedEnv off("CONVT3D_FP32X3_FP16", "0");
    EXPECT_FALSE(tuner::Fp16SplitOptIn(false));
    EXPECT_TRUE(tuner::Fp16SplitOptIn(true));
  }
  ScopedEnv on("CONVT3D_FP32X3_FP16", "1");
  EXPECT_TRUE(tuner::Fp16SplitOptIn(false));
}

// What an engine with and one without the opt-in look up and record (their keys differ only in
// the tag): each is served its own entry, neither stands in for the other at tier 2, and the
// default engine's record leaves the opted-in entry as it was.
TEST_F(TiersTest, OptedInAndDefaultFp32x3EntriesLiveSideBySide) {
  const Problem p = GanFp32x3();
  gen::DeviceLimits plain, fp16;
  fp16.fp16_split = true;
  const gen::Config c16 = gen::HeuristicPick(p, fp16), c32 = gen::HeuristicPick(p, plain);
  ASSERT_EQ(c16.split, 4) << c16.Name();
  ASSERT_EQ(c32.split, 3) << c32.Name();
  cache::Key with = Here(p), without = Here(p);
  with.code_hash = keytag::KeyCodeHash("new", "+cudnn91900", p, true);
  without.code_hash = keytag::KeyCodeHash("new", "+cudnn91900", p, false);
  auto store = cache::Store::Open(Path());
  ASSERT_THAT(store->Record(with, WinnerOf(c16, 1), {}, {"tuned", gen::SourceHash(p, c16)}),
              IsOk());
  // The default engine finds nothing of its own: the opted-in entry is not its tier 1 or 2.
  auto found = tiers::Find({store.get()}, without, p, plain);
  ASSERT_THAT(found.status(), IsOk());
  EXPECT_THAT(TiersOf(*found), ElementsAre());
  EXPECT_THAT(Joined(found->missed),
              HasSubstr("was tuned with the fp32x3 3xFP16 opt-in, this lookup is without it"));
  // It tunes and records under its own key (a re-tune, as often as it likes).
  for (int seed : {2, 3})
    ASSERT_THAT(store->Record(without, WinnerOf(c32, seed), {}, {"tuned", gen::SourceHash(p, c32)}),
                IsOk());
  auto entries = store->List();
  ASSERT_THAT(entries.status(), IsOk());
  EXPECT_EQ(entries->size(), 2u);
  auto kept = store->Lookup(with);
  ASSERT_THAT(kept.status(), IsOk());
  ASSERT_TRUE(kept.value().has_value());
  EXPECT_EQ(kept.value()->candidate, c16.Name());
  // Each engine is served its own entry at tier 1, and never the other's at tier 2.
  found = tiers::Find({store.get()}, with, p, fp16);
  ASSERT_THAT(found.status(), IsOk());
  EXPECT_THAT(TiersOf(*found), ElementsAre(1));
  EXPECT_EQ(found->options.front().winner.candidate, c16.Name());
  EXPECT_THAT(Joined(found->missed),
              HasSubstr("was tuned without the fp32x3 3xFP16 opt-in, this lookup is with it"));
  found = tiers::Find({store.get()}, without, p, plain);
  ASSERT_THAT(found.status(), IsOk());
  EXPECT_THAT(TiersOf(*found), ElementsAre(1));
  EXPECT_EQ(found->options.front().winner.candidate, c32.Name());
}

// The "machine:" line of `cache explain`: the key it looks up, code hash included.
std::string MachineLine(const std::string& out) {
  const size_t at = out.find("machine:");
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

// `cache explain` lists the 3xFP16 candidates for the tagged key: --fp32x3-fp16,
// $CONVT3D_FP32X3_FP16=1 and a --code-hash that carries the tag each opt in. Without the opt-in
// the tagged entry does not serve, and an untagged 3xFP16 winner (tuned before the tag
// existed) is not a candidate.
TEST_F(TiersTest, CliExplainServesA3xFp16WinnerOnlyWithTheOptIn) {
  const Problem p = GanFp32x3();
  gen::DeviceLimits fp16;
  fp16.fp16_split = true;
  const gen::Config c = gen::HeuristicPick(p, fp16);
  ASSERT_EQ(c.split, 4) << c.Name();
  cache::Key tagged = Here(p);
  tagged.code_hash = "new+f16split";
  {
    auto store = cache::Store::Open(Path());
    ASSERT_THAT(store->Record(tagged, WinnerOf(c, 1), {}, {"tuned", gen::SourceHash(p, c)}),
                IsOk());
  }
  const std::string cmd = "cache explain --cache '" + Path() + "' --problem " + p.Signature() +
                          " --arch sm_90 --gpu 'NVIDIA H100 80GB HBM3' --driver 13000 --nvrtc "
                          "13000 --code-hash new";
  const std::string served = "serves:   tier 1 exact: " + c.Name();
  auto without = test::RunCli(cmd);
  EXPECT_EQ(without.code, 0) << without.err;
  EXPECT_THAT(without.out, Not(HasSubstr(served)));
  EXPECT_THAT(MachineLine(without.out), Not(HasSubstr("code new+f16split")));
  EXPECT_THAT(without.out,
              HasSubstr("was tuned with the fp32x3 3xFP16 opt-in, this lookup is without it"));
  EXPECT_THAT(without.out, Not(HasSubstr("heuristic: gemm_wgmma_3xf16")));
  for (const std::string& form : {cmd + " --fp32x3-fp16", cmd + "+f16split"}) {
    auto with = test::RunCli(form);
    EXPECT_EQ(with.code, 0) << form << "\n" << with.err;
    EXPECT_THAT(with.out, HasSubstr(served)) << form;
    EXPECT_THAT(MachineLine(with.out), HasSubstr("code new+f16split")) << form;
  }
  {
    ScopedEnv opt_in("CONVT3D_FP32X3_FP16", "1");
    auto with = test::RunCli(cmd);
    EXPECT_EQ(with.code, 0) << with.err;
    EXPECT_THAT(with.out, HasSubstr(served));
  }
  {
    auto store = cache::Store::Open(Path());
    ASSERT_THAT(store->Record(Here(p), WinnerOf(c, 2), {}, {"tuned", gen::SourceHash(p, c)}),
                IsOk());
  }
  auto legacy = test::RunCli(cmd);
  EXPECT_EQ(legacy.code, 0) << legacy.err;
  EXPECT_THAT(legacy.out, HasSubstr("is not a candidate of this build"));
  EXPECT_THAT(legacy.out, Not(HasSubstr(served)));
}

// `cache list` (and prune, which keeps the same code hashes) counts a tagged entry of this
// build as this machine's: only the missing GPU stands in the way here. A tag no engine of this
// build gives does not match.
TEST_F(TiersTest, CliListTakesTheOptInsEntriesAsThisMachines) {
  const Environment env = DescribeEnvironment();
  if (env.driver_error.empty()) GTEST_SKIP() << "a GPU is present: the entries would not match";
  if (env.nvrtc_version == 0) GTEST_SKIP() << "no NVRTC: " << env.nvrtc_error;
  const Problem p = GanFp32x3();
  const gen::Config c = gen::HeuristicPick(p);
  cache::Key k = Here(p);
  k.nvrtc_version = env.nvrtc_version;
  {
    auto store = cache::Store::Open(Path());
    k.code_hash = keytag::KeyCodeHash(env.code_hash, "", p, true);
    ASSERT_THAT(store->Record(k, WinnerOf(c, 1), {}), IsOk());
    k.code_hash = env.code_hash + "+f16splitx";
    ASSERT_THAT(store->Record(k, WinnerOf(c, 2), {}), IsOk());
  }
  auto list = test::RunCli("cache list --json --cache '" + Path() + "'");
  ASSERT_EQ(list.code, 0) << list.err;
  const nlohmann::json j = nlohmann::json::parse(list.out);
  std::map<std::string, std::string> here;  // code hash -> "here"
  for (const auto& e : j.at("entries"))
    here[e.at("code_hash").get<std::string>()] = e.at("here").get<std::string>();
  EXPECT_EQ(here[env.code_hash + "+f16split"], "?") << list.out;
  EXPECT_EQ(here[env.code_hash + "+f16splitx"], "no") << list.out;
}

TEST_F(TiersTest, CliExplainSaysWhichTierServesWithoutAGpu) {
  const Problem p = Small();
  const auto [a, b] = TwoFamilies(p);
  cache::Key old = Here(p);
  old.code_hash = "old";
  {
    auto store = cache::Store::Open(Path());
    ASSERT_THAT(store->Record(old, WinnerOf(b, 1), {}, {"tuned", gen::SourceHash(p, b)}), IsOk());
  }
  const std::string identity =
      " --arch sm_90 --gpu 'NVIDIA H100 80GB HBM3' --driver 13000 --nvrtc 13000 --code-hash new";
  auto r =
      test::RunCli("cache explain --cache '" + Path() + "' --problem " + p.Signature() + identity);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("serves:   tier 2 same_gpu: " + b.Name()));
  EXPECT_THAT(r.out, HasSubstr("code_hash 'old' != 'new'"));
  EXPECT_THAT(r.out, HasSubstr("tier 1 exact: no entry for this exact key"));
  EXPECT_THAT(r.out, HasSubstr("else:     tier 5 heuristic: " + gen::HeuristicPick(p).Name()));
  EXPECT_THAT(r.out, HasSubstr("tune_if_missing: tier 2 same_gpu, recorded as this key's entry"));
  EXPECT_THAT(r.out, HasSubstr("background: tier 2 same_gpu, recorded"));
  // By shape flags, on another GPU model: tier 3.
  auto r3 = test::RunCli("cache explain --cache '" + Path() +
                         "' --input 2,8,6,6,6 --out-channels 8 --kernel-size 3 --stride 2 "
                         "--padding 1 --arch sm_90 --gpu 'NVIDIA H200' --code-hash new");
  EXPECT_EQ(r3.code, 0) << r3.err;
  EXPECT_THAT(r3.out, HasSubstr("serves:   tier 3 same_arch: " + b.Name()));
  EXPECT_THAT(r3.out, HasSubstr("background: tier 3 same_arch, then tuned on the worker thread"));
  EXPECT_THAT(r3.out, HasSubstr("cache_or_heuristic: tier 3 same_arch, recorded"));
  // An empty cache: the heuristic, and every tier's miss.
  auto r5 = test::RunCli("cache explain --cache '" + Path("none.sqlite") + "' --problem " +
                         p.Signature());
  EXPECT_EQ(r5.code, 0) << r5.err;
  EXPECT_THAT(r5.out, HasSubstr("serves:   tier 5 heuristic"));
  EXPECT_THAT(r5.out, HasSubstr("tier 4 nearest: no tuned shape"));
  EXPECT_THAT(r5.out, HasSubstr("tune_if_missing: tunes now (tier 0)"));
  EXPECT_THAT(r5.out, HasSubstr("background: tier 5 heuristic, then tuned on the worker thread"));
  auto bad = test::RunCli("cache explain --problem f32_nonsense");
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("signature"));
  auto bad_int = test::RunCli("cache explain --problem " + p.Signature() + " --driver 0x10");
  EXPECT_EQ(bad_int.code, 2);
}

}  // namespace
}  // namespace convt3d
