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

}  // namespace convt3d::gen
