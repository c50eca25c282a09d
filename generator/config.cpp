// config.cpp: a candidate's name and JSON, both read off its family's field table.
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "generator/candidates.h"
#include "generator/family.h"
#include "generator/lattice.h"

namespace convt3d::gen {
namespace {

bool Shown(const Field& f, const Config& c) { return !f.omit_default || c.*f.member != f.fallback; }

}  // namespace

std::string Config::Name() const {
  if (lattice) return (lattice == 2 ? "subpixel_" : "lattice_") + Plain().Name();
  const Family& f = FamilyOf(*this);
  std::string name = StrCat(f.name(), "_", f.Token(*this));
  for (const Field& field : f.fields()) {
    if (!Shown(field, *this) || (field.in_name && !field.in_name(*this))) continue;
    if (field.labels != nullptr)
      name += field.labels[this->*field.member];
    else if (field.fragment != nullptr)
      name += StrCat(field.fragment, this->*field.member);
  }
  return name;
}

std::string Config::ToJson() const {
  const Family& f = FamilyOf(*this);
  nlohmann::json j = {{"dtype", DTypeName(dtype)}, {"family", std::string(f.name())}};
  if (lattice) j["lattice"] = lattice;
  for (const Field& field : f.fields())
    if (Shown(field, *this) && (!field.in_json || field.in_json(*this)))
      j[field.key] = this->*field.member;
  return j.dump();
}

StatusOr<Config> Config::FromJson(const std::string& json) {
  // Messages quote the JSON (it comes from a cache file): at most 200 bytes of it.
  const std::string text = json.size() > 200 ? json.substr(0, 197) + "..." : json;
  try {
    const auto j = nlohmann::json::parse(json);
    Config c;
    bool known = false;
    for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16})
      if (j.at("dtype") == DTypeName(t)) c.dtype = t, known = true;
    if (!known) return InvalidArgument(StrCat("unknown dtype in ", text));
    const Family* f = FindFamily(j.at("family").get<std::string>());
    if (f == nullptr) return InvalidArgument(StrCat("unknown kernel family in ", text));
    c.family = f->name();
    // In table order, so that a field's condition sees the fields before it (fft: mma first).
    for (const Field& field : f->fields()) {
      if (field.in_json && !field.in_json(c)) continue;
      int& v = c.*field.member;
      if (j.contains(field.key))
        v = j.at(field.key).get<int>();
      else if (field.fallback == Field::kRequired)
        return InvalidArgument(StrCat("candidate JSON lacks ", field.key, ": ", text));
      else
        v = field.fallback;
      if (v < field.lo || v > field.hi)
        return InvalidArgument(
            StrCat("bad ", field.key, "=", v, " (", field.lo, "..", field.hi, ") in ", text));
    }
    CONVT3D_RETURN_IF_ERROR(f->CheckFields(c));
    c.lattice = j.value("lattice", 0);
    if (c.lattice < 0 || c.lattice > 2 || (c.lattice == 1 && f->SubLatticeQuota(c, nullptr) == 0) ||
        (c.lattice == 2 && !f->RunsPhaseChannels()))
      return InvalidArgument(StrCat("bad lattice in ", text));
    return c;
  } catch (const std::exception& e) {
    return InvalidArgument(StrCat("bad candidate JSON ", text, ": ", e.what()));
  }
}

}  // namespace convt3d::gen
