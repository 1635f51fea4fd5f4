#include "framework/autograd/ComputePrecision.h"

#include "framework/autograd/Node.h"
#include "framework/core/Error.h"

#include <array>
#include <string>

namespace aps::autograd {

namespace {
thread_local ComputePrecision tCurrent;

struct Entry {
  ComputePrecision::Mode mode;
  const char* name;
};
constexpr std::array<Entry, 5> kModes{{{ComputePrecision::Mode::Fp32, "fp32"},
                                       {ComputePrecision::Mode::Fp16Mixed, "fp16_mixed"},
                                       {ComputePrecision::Mode::Fp16Pure, "fp16_pure"},
                                       {ComputePrecision::Mode::Bf16Mixed, "bf16_mixed"},
                                       {ComputePrecision::Mode::Bf16Pure, "bf16_pure"}}};
}  // namespace

ComputePrecision ComputePrecision::parse(std::string_view name) {
  for (const Entry& e : kModes) {
    if (name == e.name) return ComputePrecision(e.mode);
  }
  APS_FAIL("precision.compute: unknown value '{}' (expected fp32, fp16_mixed, fp16_pure, bf16_mixed or bf16_pure)",
           std::string(name));
}

const char* ComputePrecision::name() const {
  for (const Entry& e : kModes) {
    if (e.mode == mode_) return e.name;
  }
  return "?";
}

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
