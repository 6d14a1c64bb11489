// SPDX-License-Identifier: MIT
#include "read/contentmetadata.h"

namespace shardscope::detail {

namespace {

constexpr std::string_view kInfo = "megatron.content_metadata.";

std::string pythonText(const PyValue &v)
{
    switch (v.kind) {
    case PyValue::Kind::Bool:
        return v.boolean ? "True" : "False";
    case PyValue::Kind::None:
        return "None";
    default:
        return v.summary();
    }
}

void noteEntries(const PyValue &dict, CheckpointIndex &index)
{
    if (dict.kind != PyValue::Kind::Dict)
        return;
    for (const auto &[k, v] : dict.dict)
        if (k.kind == PyValue::Kind::Str && v.kind != PyValue::Kind::Dict &&
            v.kind != PyValue::Kind::Object)
            index.info[std::string(kInfo) + k.text] = pythonText(v);
}

} // namespace

void noteContentMetadata(CheckpointIndex &index)
{
    // common.pt (megatron-core before #5160): each leaf is an object of its own.
    static const std::string kCommonPt = "common.pt/content_metadata.";
    for (const ObjectEntry &o : index.objects)
        if (o.key.starts_with(kCommonPt) && o.value)
            index.info[std::string(kInfo) + o.key.str().substr(kCommonPt.size())] =
                pythonText(*o.value);
    // Inside the DCP checkpoint: torch.save([common_dict]) under common_state/shard_0_1.
    for (const ObjectEntry &o : index.objects) {
        if (!o.key.starts_with("common_state/") || !o.location)
            continue;
        auto value = readObject(index, o);
        if (!value) {
            index.info["megatron.content_metadata"] =
                "unreadable (" + value.error().toString() + ")";
            return;
        }
        const PyValue *common = &*value;
        if (common->kind == PyValue::Kind::List && !common->items.empty())
            common = &common->items.front();
        if (const PyValue *meta = common->get("content_metadata"))
            noteEntries(*meta, index);
        return;
    }
}

} // namespace shardscope::detail
