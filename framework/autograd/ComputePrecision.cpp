#include "framework/autograd/ComputePrecision.h"

#include "framework/autograd/Node.h"
#include "framework/core/Error.h"

#include <array>
#include <string>

namespace aps::autograd {

namespace {
thread_local ComputePrecision tCurrent;

constexpr EnumNames<ComputePrecision::Mode, 5> kModeNames{{"fp32", "fp16_mixed", "fp16_pure", "bf16_mixed", "bf16_pure"}};
static_assert(kModeNames.covers(ComputePrecision::Mode::Bf16Pure), "one name per ComputePrecision::Mode");
}  // namespace

const EnumNames<ComputePrecision::Mode, 5>& ComputePrecision::names() { return kModeNames; }

ComputePrecision ComputePrecision::parse(std::string_view name) {
  if (const auto mode = kModeNames.find(name)) return ComputePrecision(*mode);
  APS_FAIL("precision.compute: unknown value '{}' (expected {})", std::string(name), kModeNames.list());
}

const char* ComputePrecision::name() const { return kModeNames.name(mode_).data(); }

ComputeFormat ComputePrecision::format() const {
  switch (mode_) {
    case Mode::Fp16Mixed:
    case Mode::Fp16Pure:
      return ComputeFormat::Fp16;
    case Mode::Bf16Mixed:
    case Mode::Bf16Pure:
      return ComputeFormat::BFloat16;
    case Mode::Fp32:
      break;
  }
  return ComputeFormat::Fp32;
}

ComputePrecision ComputePrecision::current() { return tCurrent; }

ComputePrecisionGuard::ComputePrecisionGuard(ComputePrecision precision) : previous_(tCurrent) { tCurrent = precision; }

ComputePrecisionGuard::~ComputePrecisionGuard() { tCurrent = previous_; }

ComputeFormat formatOf(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::Float32) return ComputeFormat::Fp32;
  const auto& slots = t.impl().autograd();
  if (slots.gradFn) return slots.gradFn->gradFormat();
  return slots.requiresGrad ? ComputePrecision::current().parameterFormat() : ComputeFormat::Fp32;
}

}  // namespace aps::autograd
