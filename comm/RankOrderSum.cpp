#include "comm/RankOrderSum.h"

#include "comm/ExchangeSchedule.h"
#include "framework/core/Error.h"

#include <cstring>

namespace aps::comm {

namespace {
constexpr int kEveryRank = -1;
}

RankOrderSum::RankOrderSum(const precision::Codec& codec, Mode mode, const precision::EncodeContext& base,
                           int firstPhase)
    : codec_(codec), mode_(mode), base_(base), firstPhase_(firstPhase) {}

void RankOrderSum::restart(int64_t n) {
  n_ = n;
  added_ = 0;
  step_ = 0;
}

void RankOrderSum::reset(int64_t n) {
  restart(n);
  const auto count = static_cast<size_t>(n);
  const size_t bytes = encodedSize(codec_, n);
  switch (mode_) {
    case Mode::Fp32:
      acc_.resize(count);
      sum_ = acc_.data();
      break;
    case Mode::RoundEveryAdd:
      accEncoded_.resize(bytes);
      encodedSum_ = accEncoded_.data();
      break;
    case Mode::Kahan:
      acc_.resize(count);
      comp_.assign(count, 0.0f);
      x_.resize(count);
      y_.resize(count);
      t_.resize(count);
      scratch_.resize(bytes);
      break;
  }
}

void RankOrderSum::resetInto(int64_t n, float* acc) {
  APS_CHECK(mode_ == Mode::Fp32, "RankOrderSum: only an fp32 sum accumulates in the caller's buffer");
  restart(n);
  sum_ = acc;
}

void RankOrderSum::resetEncodedInto(int64_t n, uint8_t* acc) {
  APS_CHECK(mode_ == Mode::RoundEveryAdd, "RankOrderSum: only a rounded sum keeps its encoding in the caller's buffer");
  restart(n);
  encodedSum_ = acc;
}

void RankOrderSum::roundToFormat(std::vector<float>& v) {
  codec_.encode(v.data(), n_, scratch_.data(), scheduleEncodeContext(base_, kEveryRank, firstPhase_ + step_++, 0));
  codec_.decode(scratch_.data(), n_, v.data());
}

void RankOrderSum::addFp32(const precision::Codec& codec, const uint8_t* encoded, int64_t n, float* sum, bool first) {
  if (first) {
    codec.decode(encoded, n, sum);
  } else {
    codec.decodeAdd(encoded, n, sum);
  }
}

void RankOrderSum::add(const uint8_t* encoded) {
  const int k = added_++;
  if (n_ == 0) return;
  const auto count = static_cast<size_t>(n_);
  switch (mode_) {
    case Mode::Fp32:
      addFp32(codec_, encoded, n_, sum_, k == 0);
      break;
    case Mode::RoundEveryAdd:
      if (k == 0) {
        firstEncoded_ = encoded;
      } else {
        codec_.decodeAddEncode(k == 1 ? firstEncoded_ : encodedSum_, encoded, n_, encodedSum_,
                               scheduleEncodeContext(base_, kEveryRank, firstPhase_ + 4 * k, 0));
      }
      break;
    case Mode::Kahan:
      // Kahan (1965) compensated summation with every operation rounded to the wire format,
      // as the APS artifact's optional Kahan mode: y = x - c; t = s + y; c = (t - s) - y; s = t.
      if (k == 0) {
        codec_.decode(encoded, n_, acc_.data());
        break;
      }
      codec_.decode(encoded, n_, x_.data());
      for (size_t i = 0; i < count; ++i) y_[i] = x_[i] - comp_[i];
      roundToFormat(y_);
      for (size_t i = 0; i < count; ++i) t_[i] = acc_[i] + y_[i];
      roundToFormat(t_);
      for (size_t i = 0; i < count; ++i) comp_[i] = t_[i] - acc_[i];
      roundToFormat(comp_);
      for (size_t i = 0; i < count; ++i) comp_[i] -= y_[i];
      roundToFormat(comp_);
      acc_.swap(t_);
      break;
  }
}

void RankOrderSum::result(float* out) const {
  if (n_ == 0) return;
  if (mode_ == Mode::RoundEveryAdd) {
    codec_.decode(added_ == 1 ? firstEncoded_ : encodedSum_, n_, out);
  } else if (mode_ == Mode::Fp32) {
    if (out != sum_) std::memcpy(out, sum_, static_cast<size_t>(n_) * sizeof(float));
  } else {
    std::memcpy(out, acc_.data(), static_cast<size_t>(n_) * sizeof(float));
  }
}

}  // namespace aps::comm
