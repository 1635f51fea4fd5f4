#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace aps {

// One name table per enum, in enumerator order (ggml's GGML_OP_NAME[] beside a
// static_assert on GGML_OP_COUNT): declare it right under the enum with
//   inline constexpr EnumNames<RoundingMode, 3> kRoundingModeNames{{"nearest", "stochastic", "toward_zero"}};
//   static_assert(kRoundingModeNames.covers(RoundingMode::TowardZero));  // the last enumerator
// so that an enumerator added without a name fails to compile, and write the name and parse
// functions with name() and find() instead of a switch and a chain of ifs.
template <typename E, size_t N>
struct EnumNames {
  std::array<std::string_view, N> names;

  // Whether the table has exactly one name per enumerator up to `last`.
  constexpr bool covers(E last) const { return static_cast<size_t>(last) + 1 == N; }

  constexpr std::string_view name(E value) const {
    const auto i = static_cast<size_t>(value);
    return i < N ? names[i] : std::string_view("?");
  }

  constexpr std::optional<E> find(std::string_view text) const {
    for (size_t i = 0; i < N; ++i) {
      if (names[i] == text) return static_cast<E>(i);
    }
    return std::nullopt;
  }

  // "a, b or c", for messages.
  std::string list() const {
    std::string out;
    for (size_t i = 0; i < N; ++i) {
      if (i > 0) out += i + 1 == N ? " or " : ", ";
      out += names[i];
    }
    return out;
  }
};

}  // namespace aps
