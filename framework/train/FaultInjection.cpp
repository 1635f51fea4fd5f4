#include "framework/train/FaultInjection.h"

#include "framework/core/Error.h"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace aps::train {

namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, separator);) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

int64_t parseNumber(const std::string& fault, const std::string& value) {
  try {
    size_t used = 0;
    const long long v = std::stoll(value, &used);
    if (used == value.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  APS_FAIL("{}: fault '{}': '{}' is not a non-negative integer", FaultInjection::kEnvironmentVariable, fault, value);
}

}  // namespace

FaultInjection FaultInjection::parse(const std::string& spec) {
  FaultInjection injection;
  for (const auto& text : split(spec, ';')) {
    const auto at = text.find('@');
    APS_CHECK(at != std::string::npos, "{}: fault '{}' must look like kind@rank=R,step=S", kEnvironmentVariable, text);
    Fault f;
    const std::string kind = text.substr(0, at);
    if (kind == "throw") {
      f.kind = Kind::Throw;
    } else if (kind == "exit") {
      f.kind = Kind::Exit;
    } else if (kind == "nan") {
      f.kind = Kind::NaN;
    } else if (kind == "inf") {
      f.kind = Kind::Inf;
    } else {
      APS_FAIL("{}: fault '{}' has unknown kind '{}' (throw, exit, nan, inf)", kEnvironmentVariable, text, kind);
    }
    bool haveRank = false, haveStep = false;
    for (const auto& field : split(text.substr(at + 1), ',')) {
      const auto eq = field.find('=');
      APS_CHECK(eq != std::string::npos, "{}: fault '{}': expected key=value, got '{}'", kEnvironmentVariable, text,
                field);
      const std::string key = field.substr(0, eq);
      const int64_t value = parseNumber(text, field.substr(eq + 1));
      if (key == "rank") {
        APS_CHECK(value <= std::numeric_limits<int>::max(), "{}: fault '{}': rank too large", kEnvironmentVariable,
                  text);
        f.rank = static_cast<int>(value);
        haveRank = true;
      } else if (key == "step") {
        f.step = value;
        haveStep = true;
      } else if (key == "param") {
        f.param = value;
      } else {
        APS_FAIL("{}: fault '{}' has unknown key '{}' (rank, step, param)", kEnvironmentVariable, text, key);
      }
    }
    APS_CHECK(haveRank && haveStep, "{}: fault '{}' needs rank= and step=", kEnvironmentVariable, text);
    injection.faults_.push_back(f);
  }
  return injection;
}

FaultInjection FaultInjection::fromEnvironment() {
  const char* spec = std::getenv(kEnvironmentVariable);
  return spec == nullptr ? FaultInjection() : parse(spec);
}

void FaultInjection::beforeStep(int firstRank, int localRanks, int64_t step) const {
  for (const auto& f : faults_) {
    if (f.step != step || f.rank < firstRank || f.rank >= firstRank + localRanks) continue;
    if (f.kind == Kind::Throw) APS_FAIL("injected fault: rank {} throws at step {}", f.rank, step);
    if (f.kind == Kind::Exit) {
      std::fprintf(stderr, "injected fault: rank %d exits at step %lld\n", f.rank, static_cast<long long>(step));
      std::fflush(stderr);
      std::_Exit(3);
    }
  }
}

void FaultInjection::poisonGradient(int rank, int64_t step, int64_t param, const Tensor& leaf) const {
  for (const auto& f : faults_) {
    if (f.step != step || f.rank != rank || f.param != param || (f.kind != Kind::NaN && f.kind != Kind::Inf)) continue;
    const Tensor grad = leaf.grad();
    APS_ASSERT(grad.dtype() == DType::Float32 && grad.numel() > 0);
    // A different element per fault, so that poison also lands away from a bucket's edges.
    auto* values = static_cast<float*>(grad.rawData());
    values[(static_cast<int64_t>(rank) * 7919 + step * 104729) % grad.numel()] =
        f.kind == Kind::NaN ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  }
}

}  // namespace aps::train
