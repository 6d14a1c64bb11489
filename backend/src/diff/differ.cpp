// SPDX-License-Identifier: MIT
// The diff's set-up: what the stored keys say about the checkpoint as a whole, before any
// parameter is evaluated.
#include "diff/differ.h"

#include "common/problemtext.h"
#include "diff/loadoutcome.h"

#include <algorithm>
#include <cctype>
#include <unordered_set>

namespace shardscope::detail {

Differ::Differ(const CheckpointIndex &index, const Layout &layout, const DiffOptions &options,
               const std::shared_ptr<const CheckpointIndex> &shared)
    : m_index(index)
    , m_layout(layout)
    , m_options(options)
{
    const bool literal = literalNames();
    const bool strip = enabled("wrapper_prefix");
    m_sorted = sortedKeys(shared, strip, literal, [&](SortedKeys &sorted) {
        // Two passes over every key (650,000 at DeepSeek-V3 scale), side by side.
        forEachIndex(2, 2,
                     [&](size_t i) {
                         if (i == 0)
                             detail::sortKeys(index, strip, sorted.disk, literal);
                         else
                             scanKeys(sorted);
                     },
                     {});
    });
    // A copy: the run marks the keys it uses (a memory copy, not the hashing of every key).
    m_disk = m_sorted->disk;
    m_torchDist = index.format == Format::MegatronTorchDist;
    // Only Megatron's torch_dist and fsdp_dtensor loads run the split/rename handlers; the
    // others ask for the live names as they are.
    m_fsdpDtensorLoad = detail::fsdpDtensorLoad(index);
    m_megatronLoader = m_torchDist || m_fsdpDtensorLoad;
    // An EP-local layout (one EP rank's names) stands for every EP rank: expand its experts
    // to global indices, remembering each one's local name and rank.
    const int ep = layout.parallel.ep;
    const bool expand = !layout.expertsGlobal && ep > 1 && layout.numExperts % ep == 0;
    const int local = expand ? layout.numExperts / ep : 0;
    for (const LayoutParam &p : layout.params) {
        if (!expand || p.expert < 0) {
            m_params.push_back({p, {}, 0});
            continue;
        }
        for (int r = 0; r < ep; ++r) {
            Expanded x{p, p.name, r};
            const int global = p.expert + r * local;
            x.param.name = withExpert(p.name, global);
            x.param.expert = global;
            if (x.param.fusion)
                for (FusedSection &sec : x.param.fusion->sections)
                    sec.name = withExpert(sec.name, global);
            m_params.push_back(std::move(x));
        }
    }
    for (const Expanded &x : m_params) {
        m_byName.emplace(x.param.name, &x.param);
        m_decoderLayers = std::max(m_decoderLayers, decoderLayerOf(x.param.name) + 1);
    }
    setUpTorchDist();
    m_legacy = index.format == Format::MegatronLegacy;
    if (m_legacy)
        setUpLegacy();
    // Keys a shard index lists that no shard gave: its file is missing or unreadable, or the
    // file does not hold the key (other notes on a key, e.g. a safetensors entry whose size
    // disagrees, leave it to the generic reason). One pass over the items, not a search per
    // problem (a missing DCP data file names thousands of keys, all of them tensors).
    for (const Problem &pr : index.problems)
        if (!pr.key.empty() &&
            (pr.effect == Problem::Effect::Unreadable ||
             (pr.effect == Problem::Effect::Note && pr.message == kAbsentFromShard)))
            m_keyProblems.emplace(pr.key, &pr);
    if (!m_keyProblems.empty()) {
        for (const TensorEntry &t : index.tensors)
            m_keyProblems.erase(t.key.str());
        for (const ObjectEntry &o : index.objects)
            m_keyProblems.erase(o.key.str());
    }
    // Megatron-FSDP names decoder layers per pipeline stage (NVIDIA/Megatron-LM#7452): a
    // model split over pp stages asks for decoder.layers.0… on every stage.
    if (!m_legacy && layout.parallel.pp > 1 &&
        stageLocalLayerNames(layout, formatName(index.format)))
        if (auto ends = decoderStageEnds(layout)) {
            m_stageEnds = std::move(*ends);
            for (size_t st = 0; st < m_stageEnds.size(); ++st)
                m_maxStageLayers =
                    std::max(m_maxStageLayers, m_stageEnds[st] - (st ? m_stageEnds[st - 1] : 0));
        }
}

bool Differ::stateDictLoad() const
{
    return m_index.format == Format::TorchSave || m_index.format == Format::Safetensors ||
           m_index.format == Format::SafetensorsIndex || m_index.format == Format::TorchSaveIndex;
}

bool Differ::enabled(std::string_view rule) const
{
    return std::find(m_options.disabledRules.begin(), m_options.disabledRules.end(), rule) ==
           m_options.disabledRules.end();
}

void Differ::scanKeys(SortedKeys &sorted) const
{
    uint32_t i = 0;
    auto scan = [&](std::string_view k) {
        if (k.find("._extra_state") != std::string_view::npos) {
            sorted.extraStateKeys.emplace(std::string(k), i);
            sorted.extraStateKeys.emplace(std::string(k.substr(modelWrapperLength(k))), i);
        }
        if (!sorted.stackedLayers) {
            const size_t at = k.find("decoder.layers.");
            if (at != std::string_view::npos && at + 15 < k.size() &&
                !std::isdigit(static_cast<unsigned char>(k[at + 15])))
                sorted.stackedLayers = true;
        }
        // What findStacked() can find: a layer axis (".layers." then a name) or an expert one.
        if (!sorted.mayBeStacked) {
            for (size_t l = k.find(".layers."); l != std::string_view::npos;
                 l = k.find(".layers.", l + 1))
                if (l + 8 < k.size() && !std::isdigit(static_cast<unsigned char>(k[l + 8])))
                    sorted.mayBeStacked = true;
            if (k.find(".mlp.experts.experts.linear_fc") != std::string_view::npos)
                sorted.mayBeStacked = true;
        }
        ++i;
    };
    for (const TensorEntry &t : m_index.tensors)
        scan(t.key);
    for (const ObjectEntry &o : m_index.objects)
        scan(o.key);
}

bool Differ::literalNames() const
{
    if (m_index.format != Format::Dcp)
        return false;
    std::unordered_set<std::string_view> keys;
    for (const TensorEntry &t : m_index.tensors)
        keys.insert(t.key);
    size_t hits = 0, tried = 0;
    for (const LayoutParam &p : m_layout.params) {
        hits += keys.count(p.name);
        if (++tried == 256)
            break;
    }
    return hits > 0;
}

void Differ::setUpLegacy()
{
    for (const DiskKey &k : m_disk.keys)
        if (const size_t slash = k.key.find('/'); slash != std::string_view::npos)
            m_legacyDirs.insert(std::string(k.key.substr(0, slash)));
    const ParallelConfig &par = m_layout.parallel;
    if (par.pp > 1)
        if (auto ends = decoderStageEnds(m_layout))
            m_legacyStageEnds = std::move(*ends);
    for (int t = 0; t < par.tp; ++t)
        for (int st = 0; st < std::max(1, par.pp); ++st)
            for (int e = 0; e < std::max(1, par.ep); ++e) {
                const std::string dir = legacyDir(t, st, e);
                if (!m_legacyDirs.count(dir))
                    m_legacyMissingFiles.push_back(dir);
            }
}

std::pair<int, std::string> Differ::legacyStageLocal(const std::string &name) const
{
    const int layer = decoderLayerOf(name);
    if (m_legacyStageEnds.empty() || layer < 0)
        return {0, name};
    const int stage =
        int(std::upper_bound(m_legacyStageEnds.begin(), m_legacyStageEnds.end(), layer) -
            m_legacyStageEnds.begin());
    const int offset = stage ? m_legacyStageEnds[size_t(stage) - 1] : 0;
    const std::string from = "decoder.layers." + std::to_string(layer) + ".";
    if (offset == 0 || !name.starts_with(from))
        return {stage, name};
    return {stage,
            "decoder.layers." + std::to_string(layer - offset) + "." + name.substr(from.size())};
}

std::string Differ::legacyDir(int tp, int stage, int ep) const
{
    char buf[64];
    int n = std::snprintf(buf, sizeof buf, "mp_rank_%02d", tp);
    if (m_layout.parallel.pp > 1)
        n += std::snprintf(buf + n, sizeof buf - size_t(n), "_%03d", stage);
    if (m_layout.parallel.ep > 1)
        std::snprintf(buf + n, sizeof buf - size_t(n), "_%03d", ep);
    return buf;
}

size_t Differ::stageOf(int layer) const
{
    return size_t(std::upper_bound(m_stageEnds.begin(), m_stageEnds.end(), layer) -
                  m_stageEnds.begin());
}

int Differ::stageOffset(int layer) const
{
    if (m_stageEnds.empty() || layer < 0)
        return 0;
    const size_t stage = stageOf(layer);
    return stage == 0 ? 0 : m_stageEnds[stage - 1];
}

} // namespace shardscope::detail
