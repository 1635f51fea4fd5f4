#include "framework/core/Suggest.h"

#include <algorithm>

namespace aps {

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string closestName(const std::string& value, const std::vector<std::string>& candidates, size_t maxDistance) {
  std::string best;
  size_t bestDistance = maxDistance + 1;
  for (const auto& candidate : candidates) {
    const size_t d = editDistance(value, candidate);
    if (d < bestDistance) {
      bestDistance = d;
      best = candidate;
    }
  }
  return best;
}

std::string didYouMean(const std::string& value, const std::vector<std::string>& candidates) {
  const std::string near = closestName(value, candidates);
  return near.empty() || near == value ? std::string() : "; did you mean '" + near + "'?";
}

}  // namespace aps
