// source.h: turns a (problem, candidate) into CUDA source: a constant preamble + a template.
#pragma once

#include <string>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"

namespace convt3d::gen {

// The text of templates/<name> as embedded at build time, or nullptr.
const char* EmbeddedTemplate(const std::string& name);
// SHA-256 (hex) of templates/* and generator/*.cpp, *.h at build time.
const char* SourcesHash();

// Full NVRTC source of candidate `c` for problem `p`: every shape constant is a compile-time
// constant, followed by `#line 1 "<template>"` so NVRTC errors point into the template file.
StatusOr<std::string> BuildSource(const Problem& p, const Config& c);
// Source of templates/util.cu (random fill and error reduction kernels).
StatusOr<std::string> UtilitySource();
// Hex hash of every template, the generator's sources and its version: part of every cache
// key, so any change to how kernels are generated or launched invalidates cached winners.
std::string CodeHash();
// Hex hash of BuildSource(p, c) without its first line (the generator version), so it moves only
// when the code compiled for this kernel changes: a template it includes or a preamble constant.
// The lookup tiers (src/tiers.h) store it with each tuned winner and serve a winner under another
// code version only where it is unchanged. Empty when c does not build for p.
std::string SourceHash(const Problem& p, const Config& c);
// Test hook for simulated code changes: $CONVT3D_TEST_ALTER_FAMILY names one family (e.g.
// "direct_tile") whose sources get an extra comment line, as an edit of its template would; it
// moves CodeHash and that family's SourceHash only. "" when unset (always, outside tests).
std::string AlteredFamily();

}  // namespace convt3d::gen
