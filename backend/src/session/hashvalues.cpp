// SPDX-License-Identifier: MIT
// Two checkpoints in two places compared by their tensors' digests (valuesByHash()): element by
// element would move every tensor's bytes between the places.
#include "common/shapes.h"
#include "shardscope/session.h"

#include <unordered_map>

namespace shardscope {

namespace {

using V = TensorValueDiff::Verdict;

// The key's problem when its data could not be read (its digest is then empty).
std::string unreadableWhy(const InspectResult &r, const std::string &key)
{
    for (const Problem &p : r.problems)
        if (p.key == key && p.effect == Problem::Effect::Unreadable)
            return p.toString();
    return {};
}

} // namespace

ValueDiffResult valuesByHash(const InspectResult &first, const InspectResult &second)
{
    ValueDiffResult out;
    out.first = first.index ? first.index->inputPath : std::string();
    out.second = second.index ? second.index->inputPath : std::string();
    out.layout = "the stored keys (each tensor's SHA-256 computed where its checkpoint lives; "
                 "no tensor data moved)";
    out.method = "sha256";
    std::unordered_map<std::string_view, const InspectedTensor *> theirs;
    for (const InspectedTensor &t : second.tensors)
        theirs.emplace(std::string_view(t.entry->key.data(), t.entry->key.size()), &t);
    std::unordered_map<std::string_view, bool> paired;
    auto row = [](const TensorEntry &e) {
        TensorValueDiff d;
        d.name = e.key.str();
        d.shape = e.shape.toVector();
        return d;
    };
    for (const InspectedTensor &a : first.tensors) {
        const std::string key = a.entry->key.str();
        TensorValueDiff d = row(*a.entry);
        d.dtypeA = a.entry->dtypeName;
        d.keysA = {key};
        auto it = theirs.find(key);
        if (it == theirs.end()) {
            d.why = "only in the first checkpoint";
            out.tensors.push_back(std::move(d));
            continue;
        }
        paired[it->first] = true;
        const InspectedTensor &b = *it->second;
        d.dtypeB = b.entry->dtypeName;
        d.keysB = {key};
        if (d.dtypeA != d.dtypeB || a.entry->shape.toVector() != b.entry->shape.toVector()) {
            d.why = "stored with another dtype or shape (" + d.dtypeA + " " +
                    detail::shapeText(a.entry->shape.toVector()) + " against " + d.dtypeB + " " +
                    detail::shapeText(b.entry->shape.toVector()) +
                    "): comparing by digest needs the same bytes' layout";
        } else if (a.sha256.empty() || b.sha256.empty()) {
            const std::string why = unreadableWhy(a.sha256.empty() ? first : second, key);
            d.unreadable = !why.empty();
            d.why = why.empty() ? "no digest (its data was not read)" : why;
        } else {
            d.count = a.entry->numel();
            out.bytesRead += a.entry->nbytes() + b.entry->nbytes(); // each where it lives
            if (a.sha256 == b.sha256) {
                d.verdict = V::Identical;
            } else {
                d.verdict = V::Different;
                d.differing = -1; // unknown: the digests say only that some byte differs
                d.why = "SHA-256 differs (" + a.sha256.substr(0, 12) + "… against " +
                        b.sha256.substr(0, 12) +
                        "…): some byte differs; by how much needs both checkpoints in one place";
            }
        }
        out.tensors.push_back(std::move(d));
    }
    for (const InspectedTensor &b : second.tensors) {
        const std::string_view key(b.entry->key.data(), b.entry->key.size());
        if (paired.count(key))
            continue;
        TensorValueDiff d = row(*b.entry);
        d.dtypeB = b.entry->dtypeName;
        d.keysB = {std::string(key)};
        d.why = "only in the second checkpoint";
        out.tensors.push_back(std::move(d));
    }
    return out;
}

} // namespace shardscope
