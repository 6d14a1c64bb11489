// SPDX-License-Identifier: MIT
// Two checkpoints compared value by value, through the rules that map one's tensors onto the
// other's (docs/value-diff.md; shardscope.value-diff/1).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope {

/** One side's statistics (the health kernels' fold): over its finite values. */
struct ValueSideStats
{
    int64_t count = 0, finite = 0;
    double mean = 0, std = 0, min = 0, max = 0;
};

/** A tensor of the model compared between the two checkpoints. */
struct TensorValueDiff
{
    enum class Verdict : uint8_t {
        Identical,  ///< every element bit for bit (same dtype) or equal in value (other dtypes)
        Within,     ///< not identical, every element within atol + rtol·|b|
        Different,  ///< some element beyond the tolerance
        NotCompared ///< a side lacks it, or no mapping is known: never guessed
    };
    std::string name; ///< the model's name ("…linear_fc1.weight", "….exp_avg" for optimizer state)
    std::string state; ///< optimizer state, empty for the model's tensors
    std::vector<int64_t> shape;
    std::string dtypeA, dtypeB;            ///< as stored
    std::vector<std::string> keysA, keysB; ///< the stored keys each side's values come from
    Verdict verdict = Verdict::NotCompared;
    std::string why; ///< NotCompared: why
    /** NotCompared because a side's data cannot be read (`why` names the file, key and offset). */
    bool unreadable = false;
    int64_t count = 0;
    int64_t differing = 0;          ///< elements not identical
    int64_t outside = 0;            ///< elements beyond the tolerance
    int64_t nonfinite = 0;          ///< pairs with a NaN or an infinity (not in the figures below)
    std::vector<int64_t> firstDiff; ///< multi-index of the first differing element; empty: none
    std::vector<int64_t> maxAbsAt;  ///< multi-index of the largest |a − b|
    double maxAbs = 0, maxRel = 0, meanAbs = 0, rms = 0;
    double relL2 = 0;    ///< ‖a − b‖ / ‖b‖ (0 when both are 0)
    double cosine = 1;   ///< a·b / (‖a‖ ‖b‖) (1 when both are 0)
    int64_t maxUlp = -1; ///< in ULPs of the narrower float dtype; -1: not measured
    std::string ulpDtype;
    /** [0]: equal pairs; [k]: |a − b| in [2^(k − 41), 2^(k − 40)) (first and last open). */
    std::vector<int64_t> histogram;
    ValueSideStats a, b;
    std::string device; ///< where the kernels ran: "cpu" or the GPU's name
};
std::string_view verdictName(TensorValueDiff::Verdict v);

struct ValueDiffResult
{
    std::string first, second;
    std::string
        layout; ///< what named the tensors: a layout file, a config, or the first checkpoint
    double rtol = 0, atol = 0;
    std::vector<TensorValueDiff> tensors; ///< in the model's order
    int processes = 1, threads = 1;
    uint64_t bytesRead = 0, maxMemory = 0;
    bool cancelled = false;
    /** The user accepts tensors that cannot be compared (--allow-not-compared). */
    bool allowNotCompared = false;
    /** How values were compared: empty, element by element; "sha256", by each stored
     *  tensor's SHA-256 where each checkpoint lives (valuesByHash(): two places). */
    std::string method;
    size_t count(TensorValueDiff::Verdict v) const;
    /** Every compared tensor within the tolerance; NotCompared ones do not count (passes()). */
    bool withinTolerance() const;
    /** Tensors whose data a side could not read (exit 2; the others are still compared). */
    size_t unreadable() const;
    /** Exit 0: nothing cancelled or unreadable, every compared tensor within the tolerance,
     *  and every tensor compared unless allowNotCompared. */
    bool passes() const;
};

/** shardscope.value-diff/1 */
std::string valueDiffToJson(const ValueDiffResult &result);
/** The CLI's text: a summary, then tensors by verdict, the worst first, repeated layers folded. */
std::string renderValueDiffText(const ValueDiffResult &result);

} // namespace shardscope
