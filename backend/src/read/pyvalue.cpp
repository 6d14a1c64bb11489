// SPDX-License-Identifier: MIT
#include "shardscope/pyvalue.h"
#include "common/shapes.h"

#include <cstdio>

namespace shardscope {

using detail::shapeText;

namespace {

std::string quoted(const std::string &s, size_t maxLen)
{
    std::string out = "'";
    for (char c : s) {
        if (out.size() >= maxLen) {
            out += "…";
            break;
        }
        if (c == '\n')
            out += "\\n";
        else if (uint8_t(c) < 0x20)
            out += '?';
        else
            out += c;
    }
    return out + "'";
}

} // namespace

PyValue::PyValue() = default;
PyValue::~PyValue() = default;
PyValue::PyValue(const PyValue &) = default;
PyValue::PyValue(PyValue &&) noexcept = default;
PyValue &PyValue::operator=(const PyValue &) = default;
PyValue &PyValue::operator=(PyValue &&) noexcept = default;

std::string PyValue::summary(size_t maxLen) const
{
    switch (kind) {
    case Kind::None:
        return "None";
    case Kind::Bool:
        return boolean ? "True" : "False";
    case Kind::Int:
        return std::to_string(integer);
    case Kind::BigInt:
        return text;
    case Kind::Float: {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", real);
        return buf;
    }
    case Kind::Str:
        return quoted(text, maxLen);
    case Kind::Bytes:
        return "bytes[" + std::to_string(text.size()) + "]";
    case Kind::Tuple:
    case Kind::List:
    case Kind::Set: {
        const char *open = kind == Kind::Tuple ? "(" : kind == Kind::List ? "[" : "{";
        const char *close = kind == Kind::Tuple ? ")" : kind == Kind::List ? "]" : "}";
        std::string s = open;
        for (size_t i = 0; i < items.size(); ++i) {
            if (s.size() > maxLen) {
                s += ", …" + std::to_string(items.size() - i) + " more";
                break;
            }
            s += (i ? ", " : "") + items[i].summary(maxLen / 2);
        }
        return s + close;
    }
    case Kind::Dict:
        return "dict[" + std::to_string(dict.size()) + "]";
    case Kind::Global:
        return text + "." + name;
    case Kind::Object:
        if (text == "argparse" && name == "Namespace" && items.size() > 1)
            return "argparse.Namespace(" + std::to_string(items[1].dict.size()) + " fields)";
        return (text.empty() ? name : text + "." + name) + "(…)";
    case Kind::PersistentId:
        return "persistent_id";
    case Kind::Tensor:
        return "tensor(" + text + ", " + shapeText(ints) + ")";
    case Kind::Truncated:
        return "<" + text + ">";
    }
    return {};
}

const PyValue *PyValue::get(std::string_view key) const
{
    const PyValue *d = this;
    if (kind == Kind::Object) {
        if (items.size() < 2)
            return nullptr;
        d = &items[1];
    }
    if (d->kind != Kind::Dict)
        return nullptr;
    for (const auto &[k, v] : d->dict)
        if (k.kind == Kind::Str && k.text == key)
            return &v;
    return nullptr;
}

} // namespace shardscope
