#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace aps {

// Levenshtein distance: insertions, deletions and substitutions of one character.
size_t editDistance(const std::string& a, const std::string& b);

// The candidate nearest to `value` when it is at most `maxDistance` edits away (a typo), else "".
std::string closestName(const std::string& value, const std::vector<std::string>& candidates, size_t maxDistance = 2);

// "; did you mean 'x'?" for a near miss among `candidates`, else "": appended to an error
// that names an unknown value.
std::string didYouMean(const std::string& value, const std::vector<std::string>& candidates);

}  // namespace aps
