// table.h: plain aligned text columns, for the CLI's tables and the bench's report.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace convt3d {

// Columns padded to their widest cell and two spaces apart, a rule of dashes under the header.
// An 'r' in `align` right-aligns that column (numbers); other columns are left-aligned, the last
// one without trailing spaces.
class TextTable {
 public:
  TextTable(std::vector<std::string> headers, std::string align)
      : headers_(std::move(headers)), align_(std::move(align)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }  // short: padded
  bool empty() const { return rows_.empty(); }

  std::string ToString() const {
    std::vector<size_t> width(headers_.size(), 0);
    for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
    for (const auto& r : rows_)
      for (size_t c = 0; c < r.size() && c < width.size(); ++c)
        width[c] = std::max(width[c], r[c].size());
    std::string out;
    auto line = [&](const std::vector<std::string>& r) {
      for (size_t c = 0; c < headers_.size(); ++c) {
        const std::string cell = c < r.size() ? r[c] : "";
        const std::string pad(width[c] - std::min(width[c], cell.size()), ' ');
        const bool last = c + 1 == headers_.size();
        const bool right = c < align_.size() && align_[c] == 'r';
        out += right ? pad + cell : cell + (last ? "" : pad);
        if (!last) out += "  ";
      }
      out += "\n";
    };
    line(headers_);
    std::vector<std::string> rule;
    for (size_t w : width) rule.emplace_back(w, '-');
    line(rule);
    for (const auto& r : rows_) line(r);
    return out;
  }

 private:
  std::vector<std::string> headers_;
  std::string align_;  // one 'l' or 'r' per column
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace convt3d
