// SPDX-License-Identifier: MIT
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shardscope {

/**
 * An inert value decoded from a pickle. Nothing is ever executed to produce it: classes and
 * callables are recorded by name (Global), instances as (class, args, state) (Object).
 */
struct PyValue
{
    enum class Kind : uint8_t {
        None,
        Bool,
        Int,
        BigInt, ///< text holds the decimal digits
        Float,
        Str,
        Bytes,
        Tuple,
        List,
        Dict,
        Set,
        Global, ///< text = module, name = qualified name
        Object, ///< text/name = class or callable; items = {args, state, listitems}; dict =
                ///< dictitems
        PersistentId,
        Tensor,   ///< a tensor inside a torch.save payload: text = dtype, ints = shape
        Truncated ///< beyond the depth bound or a reference cycle; text says which
    };

    // Out of line: a vector of pair<PyValue, PyValue> inside PyValue is only instantiable once
    // PyValue is complete (clang with libstdc++ rejects the implicit, inline ones).
    PyValue();
    ~PyValue();
    PyValue(const PyValue &);
    PyValue(PyValue &&) noexcept;
    PyValue &operator=(const PyValue &);
    PyValue &operator=(PyValue &&) noexcept;

    Kind kind = Kind::None;
    bool boolean = false;
    int64_t integer = 0;
    double real = 0.0;
    std::string text;
    std::string name;
    std::vector<int64_t> ints;
    std::vector<PyValue> items;
    std::vector<std::pair<PyValue, PyValue>> dict;

    /** A short human form: "3", "'abc'", "bytes[16]", "argparse.Namespace(...)", "list[3]". */
    std::string summary(size_t maxLen = 80) const;
    /** Looks up a string key in a Dict, or an attribute in an Object's dict state. */
    const PyValue *get(std::string_view key) const;
};

} // namespace shardscope
