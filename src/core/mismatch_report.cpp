#include "core/mismatch_report.h"

#include <sstream>

#include "core/error.h"

namespace magi2 {

std::string join_names(const std::vector<std::string>& items, size_t max_items) {
  std::ostringstream os;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) os << (i ? ", " : "") << items[i];
  if (items.size() > max_items) os << ", ... (" << items.size() - max_items << " more)";
  return os.str();
}

void throw_if_mismatch(const std::string& head, const std::vector<std::string>& missing,
                       const std::vector<std::string>& unexpected, const std::vector<std::string>& wrong,
                       const std::vector<std::string>& duplicated, size_t max_items) {
  if (missing.empty() && unexpected.empty() && wrong.empty() && duplicated.empty()) return;
  std::ostringstream os;
  os << head;
  auto list = [&](const std::vector<std::string>& v, const char* what) {
    if (!v.empty()) os << " " << v.size() << " " << what << " [" << join_names(v, max_items) << "];";
  };
  list(missing, "missing");
  list(unexpected, "unexpected");
  list(wrong, "with the wrong shape/dtype");
  list(duplicated, "duplicated");
  std::string msg = os.str();
  msg.pop_back();  // the last list's ';'
  throw Error(msg);
}

}  // namespace magi2
