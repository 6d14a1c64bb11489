// SPDX-License-Identifier: MIT
// Tied weights (an output layer that is its embedding): names that are one tensor. A load asks
// for each name and fills the one tensor from each in turn, so the last stored one decides its
// values; where the stored tensors differ, the others' trained values are lost without a word
// (vllm-project/vllm#51063, NVIDIA-NeMo/Automodel#2941). A name the checkpoint lacks is still
// filled, through its tie, though a strict load names it missing.
#include "diff/differ.h"

#include <algorithm>
#include <unordered_map>

namespace shardscope::detail {

namespace {

// The stored tensors behind a filled entry: one source, read whole (a tie is of whole tensors).
const DiffSource *wholeSource(const DiffEntry &e)
{
    return e.sources.size() == 1 ? &e.sources.front() : nullptr;
}

// Whether two sources are the same bytes on disk (torch.save keeps a tied pair as one storage).
bool sameStorage(const CheckpointIndex &index, const DiffSource &a, const DiffSource &b)
{
    if (a.entry < 0 || b.entry < 0 || size_t(a.entry) >= index.tensors.size() ||
        size_t(b.entry) >= index.tensors.size() || a.index != b.index)
        return false;
    const TensorEntry &x = index.tensors[size_t(a.entry)], &y = index.tensors[size_t(b.entry)];
    if (x.chunks.size() != y.chunks.size() || x.shape.toVector() != y.shape.toVector() ||
        x.dtype != y.dtype || x.strides != y.strides || x.storageOffset != y.storageOffset)
        return false;
    for (size_t c = 0; c < x.chunks.size(); ++c)
        if (x.chunks[c].file != y.chunks[c].file || x.chunks[c].offset != y.chunks[c].offset ||
            x.chunks[c].length != y.chunks[c].length)
            return false;
    return true;
}

} // namespace

std::optional<bool> Differ::sameStored(const DiffSource &a, const DiffSource &b) const
{
    if (a.key == b.key && a.index == b.index)
        return true;
    if (sameStorage(m_index, a, b))
        return true;
    if (a.shape != b.shape || a.dtype != b.dtype)
        return false;
    if (!m_options.sameValues)
        return std::nullopt;
    return m_options.sameValues(a, b);
}

// dcp.load plans the state dict's keys sorted (state_dict_loader.load), and FileSystemReader
// reads file by file, the files in the order that plan first names them, each file's items in
// the plan's order: a key's place is its file's rank, then its own in the sorted keys.
std::vector<std::pair<size_t, size_t>> Differ::dcpReadOrder(const DiffResult &r) const
{
    std::vector<size_t> sorted;
    for (size_t i = 0; i < r.entries.size(); ++i)
        if (r.entries[i].section == Section::Model && !r.entries[i].requestKeys.empty())
            sorted.push_back(i);
    std::sort(sorted.begin(), sorted.end(), [&](size_t a, size_t b) {
        return r.entries[a].requestKeys.front() < r.entries[b].requestKeys.front();
    });
    std::unordered_map<uint32_t, size_t> fileRank;
    std::vector<std::pair<size_t, size_t>> order(r.entries.size(), {SIZE_MAX, SIZE_MAX});
    for (size_t place = 0; place < sorted.size(); ++place) {
        const DiffEntry &e = r.entries[sorted[place]];
        if (e.sources.empty() || e.sources.front().entry < 0 ||
            size_t(e.sources.front().entry) >= m_index.tensors.size())
            continue;
        const TensorEntry &t = m_index.tensors[size_t(e.sources.front().entry)];
        size_t last = 0;
        for (const Location &c : t.chunks)
            last = std::max(last, fileRank.emplace(c.file, fileRank.size()).first->second);
        order[sorted[place]] = {last, place};
    }
    return order;
}

void Differ::applyTies(DiffResult &r)
{
    if (m_layout.ties.empty() || m_megatronLoader || m_legacy)
        return;
    std::unordered_map<std::string_view, size_t> at;
    for (size_t i = 0; i < r.entries.size(); ++i)
        if (r.entries[i].section == Section::Model)
            at.emplace(r.entries[i].name, i);
    std::vector<std::pair<size_t, size_t>> readOrder;
    const bool dcp = m_index.format == Format::Dcp;
    for (const std::vector<std::string> &tie : m_layout.ties) {
        std::vector<size_t> members, filled;
        for (const std::string &n : tie)
            if (const auto it = at.find(n); it != at.end()) {
                members.push_back(it->second);
                if (r.entries[it->second].realLoadFills && wholeSource(r.entries[it->second]))
                    filled.push_back(it->second);
            }
        if (members.size() < 2 || filled.empty())
            continue;
        // The load fills the one tensor from each filled name in turn: the last read decides.
        if (dcp && readOrder.empty())
            readOrder = dcpReadOrder(r);
        const size_t winner =
            dcp ? *std::max_element(filled.begin(), filled.end(),
                                    [&](size_t a, size_t b) { return readOrder[a] < readOrder[b]; })
                : filled.back();
        DiffEntry &w = r.entries[winner];
        const std::string how =
            dcp ? "dcp.load reads " + w.sources.front().key +
                      " last (file by file, each in the sorted order of the state dict's keys)"
                : "load_state_dict fills it from each name in the state dict's order, " + w.name +
                      " last";
        for (size_t i : members) {
            if (i == winner)
                continue;
            DiffEntry &e = r.entries[i];
            if (!e.realLoadFills && e.sources.empty() && e.unreadKeys.empty()) {
                // Not stored: filled through the tie. A strict load still names it missing and
                // raises; a partial one names it and loads it right.
                e.tiedTo = w.name;
                e.reason = e.requestKeys.empty() ? "not stored" : "no " + e.requestKeys.front();
                e.reason += " in the checkpoint, but the model ties it to " + w.name +
                            " (one tensor), which the load fills from " + w.sources.front().key +
                            ": its values are right" +
                            (m_options.strictLoad ? "; a strict load still names it missing"
                                                  : " (a partial load names it missing)");
                e.fix = "Load with strict=False (its values come through the tie), or save the "
                        "tied model's state dict as it is (both names).";
                if (!m_options.strictLoad) {
                    e.status = LoadStatus::Rename;
                    e.realLoadFills = true;
                    ++r.loadableModel;
                    e.sources = w.sources;
                    e.fix.clear();
                }
                continue;
            }
            if (!e.realLoadFills || !wholeSource(e))
                continue;
            const std::optional<bool> same = sameStored(*wholeSource(e), *wholeSource(w));
            if (same == true) {
                e.reason =
                    "tied to " + w.name + " (one tensor); both are stored, with equal values";
                continue;
            }
            if (!same) {
                m_tieWarnings.push_back(
                    "tie: " + e.name + " and " + w.name +
                    " are one tensor and both are stored; whether their values differ was not "
                    "checked (the load keeps " +
                    w.sources.front().key + "'s)");
                continue;
            }
            e.status = LoadStatus::WrongSource;
            e.realLoadFills = false;
            --r.loadableModel;
            e.wrongSource = true;
            e.reason = "tied to " + w.name + " (one tensor): " + how + ", so it holds " +
                       w.sources.front().key + "'s values; " + wholeSource(e)->key +
                       "'s stored values differ and are lost without a word";
            e.fix = "The checkpoint was trained untied (two tensors): build the model untied "
                    "(tie_word_embeddings: false; Megatron: --untie-embeddings-and-output-"
                    "weights) to keep both, or decide which one the tied model should keep and "
                    "drop the other from the checkpoint.";
        }
    }
}

void Differ::noteTiedUnconsumed(DiffResult &r)
{
    if (m_layout.ties.empty())
        return;
    std::unordered_map<std::string_view, size_t> at;
    for (size_t i = 0; i < r.entries.size(); ++i)
        if (r.entries[i].section == Section::Model)
            at.emplace(r.entries[i].name, i);
    for (UnconsumedKey &u : r.unconsumed) {
        if (!u.tensor || u.entry < 0 || size_t(u.entry) >= m_index.tensors.size())
            continue;
        const std::string name(u.key.substr(modelWrapperLength(u.key)));
        for (const std::vector<std::string> &tie : m_layout.ties) {
            if (std::find(tie.begin(), tie.end(), name) == tie.end() || m_byName.count(name))
                continue;
            // A name the tied model has no weight for: the tensor it is tied to is what loads.
            for (const std::string &other : tie) {
                const auto it = at.find(other);
                if (other == name || it == at.end() || !r.entries[it->second].realLoadFills ||
                    !wholeSource(r.entries[it->second]))
                    continue;
                const DiffSource &kept = *wholeSource(r.entries[it->second]);
                const TensorEntry &t = m_index.tensors[size_t(u.entry)];
                const DiffSource self{u.key,  t.shape.toVector(), t.dtypeName, 0, 0, 0, 0, {},
                                      u.entry};
                const std::optional<bool> same = sameStored(self, kept);
                u.redundant = same == true;
                u.note = "the model ties " + name + " to " + other + " (no weight of its own) " +
                         "and loads " + kept.key +
                         (same == true ? "; this stored copy has the same values: nothing is lost"
                          : same == false ? "; this stored copy's values differ: its trained "
                                            "values are lost (saved untied: build the model "
                                            "untied, tie_word_embeddings: false / "
                                            "--untie-embeddings-and-output-weights, to keep them)"
                                          : "; whether this stored copy's values differ was not "
                                            "checked");
                break;
            }
        }
    }
}

} // namespace shardscope::detail
