// SPDX-License-Identifier: MIT
// The load planner against the bundled demo, which real torch wrote over 2 ranks with
// Megatron-FSDP's flat, row-aligned shards (tools/make_demo.py): the planned boxes of every
// stored model key must be exactly the chunks torch wrote.
#include "testenv.h"

#include <shardscope/checkpoint.h>
#include <shardscope/diff.h>
#include <shardscope/layout.h>
#include <shardscope/loadplan.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <tuple>

using namespace shardscope;
namespace fs = std::filesystem;

namespace {

struct Demo
{
    CheckpointIndex index;
    Layout layout;
    DiffResult diff;
};

std::optional<Demo> openDemo(int world, ParallelConfig parallel = {}, fs::path demo = {})
{
    if (demo.empty())
        demo = fs::path(toolsDir()) / ".." / "resources" / "demo" / "dsv3-mini";
    auto index = openCheckpoint(demo.string());
    if (!index)
        return std::nullopt;
    LayoutOptions o;
    o.parallel = parallel;
    o.parallel.dpShard = world;
    auto layout = layoutFromConfig((demo / "config.json").string(), o);
    if (!layout)
        return std::nullopt;
    auto diff = diffAgainstLayout(*index, *layout, {});
    if (!diff)
        return std::nullopt;
    return Demo{std::move(*index), std::move(*layout), std::move(*diff)};
}

using Boxes = std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>>;

Boxes storedChunks(const TensorEntry &t)
{
    Boxes stored;
    for (size_t c = 0; c < t.chunks.size(); ++c)
        stored.insert({std::vector<int64_t>(t.chunkOffsets(c).begin(), t.chunkOffsets(c).end()),
                       std::vector<int64_t>(t.chunkSizes(c).begin(), t.chunkSizes(c).end())});
    return stored;
}

ParallelConfig parallel(int tp, int pp, int ep, int etp)
{
    ParallelConfig p;
    p.tp = tp;
    p.pp = pp;
    p.ep = ep;
    p.etp = etp;
    return p;
}

} // namespace

TEST(LoadPlan, DemoChunksAreThePlannedShards)
{
    auto demo = openDemo(2);
    ASSERT_TRUE(demo);
    ASSERT_TRUE(demo->diff.clean());
    auto plan = planLoad(demo->layout, demo->diff);
    ASSERT_TRUE(plan.ok()) << plan.error().toString();
    ASSERT_EQ(plan->ranks.size(), 2u);

    std::map<std::string, Boxes> planned;
    for (const RankPlan &r : plan->ranks) {
        EXPECT_TRUE(r.unloadable.empty());
        for (const ShardRead &read : r.reads)
            EXPECT_TRUE(planned[read.key].insert({read.offsets, read.sizes}).second)
                << read.key << ": two ranks read the same box";
    }
    size_t keys = 0;
    for (const TensorEntry &t : demo->index.tensors) {
        if (!t.key.starts_with("model.module."))
            continue;
        if (t.key.ends_with("router.expert_bias")) // a buffer: written whole, not FSDP-sharded
            continue;
        EXPECT_EQ(planned[t.key.str()], storedChunks(t)) << t.key;
        ++keys;
    }
    EXPECT_GT(keys, 100u);
}

// Resharding to another world size: each parameter is covered exactly once, row-aligned.
TEST(LoadPlan, ShardsPartitionEveryParameter)
{
    for (int world : {1, 2, 3, 4, 8}) {
        auto demo = openDemo(world);
        ASSERT_TRUE(demo);
        auto plan = planLoad(demo->layout, demo->diff);
        ASSERT_TRUE(plan.ok()) << plan.error().toString();
        std::map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> slices;
        for (const RankPlan &r : plan->ranks)
            for (const ParamShard &s : r.shards) {
                EXPECT_EQ(s.flatBegin % s.rowSize, 0);
                EXPECT_EQ(s.flatEnd % s.rowSize, 0);
                if (s.flatEnd > s.flatBegin)
                    slices[s.param].push_back({s.flatBegin, s.flatEnd});
            }
        for (auto &[param, v] : slices) {
            std::sort(v.begin(), v.end());
            int64_t at = 0;
            for (auto [a, b] : v) {
                EXPECT_EQ(a, at) << demo->layout.params[param].name << " world " << world;
                at = b;
            }
            int64_t numel = 1;
            for (int64_t d : demo->layout.params[param].shape)
                numel *= d;
            EXPECT_EQ(at, numel) << demo->layout.params[param].name << " world " << world;
        }
    }
}

// The MLA handler disabled: the fused parameters' shards have no source, on every rank that
// holds a piece of them.
TEST(LoadPlan, UnloadableShardsAreNamed)
{
    auto demo = openDemo(2);
    ASSERT_TRUE(demo);
    DiffOptions o;
    o.disabledRules = {"mla_down_proj"};
    auto diff = diffAgainstLayout(demo->index, demo->layout, o);
    ASSERT_TRUE(diff.ok());
    auto plan = planLoad(demo->layout, *diff);
    ASSERT_TRUE(plan.ok());
    std::set<std::string> unloadable, want;
    for (const RankPlan &r : plan->ranks)
        for (uint32_t p : r.unloadable)
            unloadable.insert(demo->layout.params[p].name);
    for (const DiffEntry &e : diff->entries)
        if (e.section == Section::Model && !e.realLoadFills)
            want.insert(e.param);
    EXPECT_EQ(unloadable, want);
    EXPECT_FALSE(want.empty());
}

// Real torch wrote the demo model from TP 2 × DP 2 ranks with experts over EP 2, each rank the
// chunks of its flat shard of every TP-local parameter (tools/make_tp_checkpoint.py): planned for
// the same configuration, every stored key is read in exactly those boxes, and only
// TP-replicated parameters are read by more than one rank.
TEST(LoadPlan, TensorAndExpertParallelChunksAreThePlannedShards)
{
    auto demo = openDemo(2, parallel(2, 1, 2, 1), tpFixtureDir());
    ASSERT_TRUE(demo) << tpFixtureDir();
    ASSERT_TRUE(demo->diff.clean());
    auto plan = planLoad(demo->layout, demo->diff);
    ASSERT_TRUE(plan.ok()) << plan.error().toString();
    ASSERT_EQ(plan->world, 4);
    EXPECT_EQ(plan->expertDp, 2);

    std::map<std::string, Boxes> planned;
    std::set<std::string> replicated;
    size_t columnSplit = 0, sectioned = 0;
    for (const RankPlan &r : plan->ranks) {
        EXPECT_TRUE(r.unloadable.empty());
        std::set<uint32_t> replicas;
        for (const ParamShard &s : r.shards) {
            if (s.replica)
                replicas.insert(s.param);
            columnSplit += s.colEnd > s.colBegin;
            sectioned += s.pieces.size() > 1;
        }
        for (const ShardRead &read : r.reads) {
            const bool fresh = planned[read.key].insert({read.offsets, read.sizes}).second;
            if (replicas.count(read.param)) { // the same box as TP rank 0 of its DP rank
                replicated.insert(read.key);
                EXPECT_FALSE(fresh) << read.key << ": rank " << r.rank;
            } else {
                EXPECT_TRUE(fresh) << read.key << ": rank " << r.rank << " reads another's box";
            }
        }
    }
    EXPECT_GT(columnSplit, 0u);
    EXPECT_GT(sectioned, 0u); // a TP rank's SwiGLU/MLA rows are runs of two sections
    EXPECT_FALSE(replicated.empty());
    size_t keys = 0;
    for (const TensorEntry &t : demo->index.tensors) {
        if (!t.key.starts_with("model.module.") || t.key.ends_with("router.expert_bias"))
            continue;
        EXPECT_EQ(planned[t.key.str()], storedChunks(t)) << t.key;
        ++keys;
    }
    EXPECT_GT(keys, 100u);
}

// Every parallel configuration: each element of every parameter is held by exactly one rank of
// each (TP-replica) copy, a rank holds only its own stage's layers and its own EP rank's experts,
// and a TP rank's pieces lie where its TP slice of the parameter is.
TEST(LoadPlan, ParallelShardsTileEveryParameter)
{
    struct Case
    {
        int dp;
        ParallelConfig par;
    };
    for (const Case &c : {Case{2, parallel(2, 1, 1, 1)}, Case{2, parallel(2, 1, 2, 1)},
                          Case{2, parallel(2, 1, 2, 2)}, Case{2, parallel(1, 2, 1, 1)},
                          Case{2, parallel(2, 2, 2, 1)}, Case{3, parallel(2, 1, 1, 1)},
                          Case{4, parallel(1, 1, 4, 1)}}) {
        auto demo = openDemo(c.dp, c.par);
        ASSERT_TRUE(demo);
        auto plan = planLoad(demo->layout, demo->diff);
        ASSERT_TRUE(plan.ok()) << plan.error().toString();
        const ParallelConfig &par = plan->parallel;
        const std::string what = "tp " + std::to_string(par.tp) + " dp " + std::to_string(c.dp) +
                                 " pp " + std::to_string(par.pp) + " ep " + std::to_string(par.ep) +
                                 " etp " + std::to_string(par.etp);
        ASSERT_EQ(plan->world, par.tp * c.dp * par.pp) << what;
        std::map<uint32_t, std::vector<int>> held; // per element: primary copies
        std::map<uint32_t, std::set<int>> stages;
        for (const RankPlan &r : plan->ranks)
            for (const ParamShard &s : r.shards) {
                const LayoutParam &p = demo->layout.params[s.param];
                int64_t row = 1;
                for (size_t d = 1; d < p.shape.size(); ++d)
                    row *= p.shape[d];
                const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
                auto &h = held[s.param];
                h.resize(size_t(rows * row));
                stages[s.param].insert(r.coords.pp);
                if (p.expert >= 0) {
                    EXPECT_EQ(p.expert / (demo->layout.numExperts / par.ep), r.coords.ep)
                        << p.name << " " << what;
                }
                int64_t local = 0;
                for (const ShardPiece &pc : s.pieces) {
                    EXPECT_EQ(pc.localRow, s.firstRow() + local) << p.name << " " << what;
                    local += pc.rows;
                    for (int64_t i = pc.paramRow; i < pc.paramRow + pc.rows; ++i)
                        for (int64_t j = s.colEnd > s.colBegin ? s.colBegin : 0;
                             j < (s.colEnd > s.colBegin ? s.colEnd : row); ++j)
                            h[size_t(i * row + j)] += s.replica ? 0 : 1;
                }
                EXPECT_EQ(local, s.rows()) << p.name << " " << what;
            }
        for (auto &[param, h] : held) {
            const LayoutParam &p = demo->layout.params[param];
            EXPECT_EQ(std::count(h.begin(), h.end(), 1), std::ptrdiff_t(h.size()))
                << p.name << " " << what;
            EXPECT_EQ(stages[param].size(), 1u) << p.name << " " << what;
        }
        if (par.pp == 2) {
            const auto &l0 = stages[0]; // embedding: first stage
            const auto &out = stages[uint32_t(
                std::find_if(demo->layout.params.begin(), demo->layout.params.end(),
                             [](const LayoutParam &p) { return p.name == "output_layer.weight"; }) -
                demo->layout.params.begin())];
            EXPECT_EQ(*l0.begin(), 0);
            EXPECT_EQ(*out.begin(), 1);
        }
    }
}

// A configuration the planner cannot place is an error that says why, not a wrong plan.
TEST(LoadPlan, ImpossibleConfigurationsAreErrors)
{
    for (auto [dp, par] : {std::pair{2, parallel(1, 1, 4, 1)},
                           {2, parallel(1, 3, 1, 1)},
                           {2, parallel(3, 1, 1, 1)}}) {
        auto demo = openDemo(dp, par);
        ASSERT_TRUE(demo);
        auto plan = planLoad(demo->layout, demo->diff);
        ASSERT_FALSE(plan.ok());
        EXPECT_FALSE(plan.error().message.empty());
    }
}

// Megatron's uneven pipeline split (--decoder-first/last-pipeline-num-layers): the first and last
// stages take the counts given and the stages between share the rest evenly; the embedding is on
// the first stage, the output layer and MTP on the last. The counts survive the layout's JSON.
TEST(LoadPlan, UnevenPipelineStages)
{
    struct Case
    {
        int pp, first, last;
        std::vector<int> stageOfLayer; // the demo's 4 decoder layers
    };
    for (const Case &c : {Case{3, 1, 1, {0, 1, 1, 2}}, Case{2, 1, 0, {0, 1, 1, 1}},
                          Case{4, 0, 1, {0, 1, 2, 3}}, Case{2, 3, 1, {0, 0, 0, 1}}}) {
        ParallelConfig par = parallel(1, c.pp, 1, 1);
        par.firstStageLayers = c.first;
        par.lastStageLayers = c.last;
        auto demo = openDemo(1, par);
        ASSERT_TRUE(demo);
        auto again = layoutFromJson(layoutToJson(demo->layout), "round trip");
        ASSERT_TRUE(again.ok());
        EXPECT_EQ(again->parallel.firstStageLayers, c.first);
        EXPECT_EQ(again->parallel.lastStageLayers, c.last);
        auto plan = planLoad(*again, demo->diff);
        ASSERT_TRUE(plan.ok()) << plan.error().toString();
        ASSERT_EQ(plan->world, c.pp);
        for (const RankPlan &r : plan->ranks)
            for (const ParamShard &s : r.shards) {
                const std::string &name = demo->layout.params[s.param].name;
                int want = -1;
                if (name.starts_with("embedding."))
                    want = 0;
                else if (name.starts_with("mtp.") || name.starts_with("output_layer.") ||
                         name.starts_with("decoder.final_layernorm."))
                    want = c.pp - 1;
                else if (name.starts_with("decoder.layers."))
                    want = c.stageOfLayer[size_t(std::stoi(name.substr(15)))];
                EXPECT_EQ(r.coords.pp, want) << name << " pp " << c.pp;
            }
    }
    // Counts that leave the stages between an uneven share, or more layers than there are.
    for (auto [pp, first, last] : {std::tuple{3, 0, 0}, {3, 1, 0}, {2, 3, 3}}) {
        ParallelConfig par = parallel(1, pp, 1, 1);
        par.firstStageLayers = first;
        par.lastStageLayers = last;
        auto demo = openDemo(1, par);
        ASSERT_TRUE(demo);
        EXPECT_FALSE(planLoad(demo->layout, demo->diff).ok()) << pp << " " << first << " " << last;
    }
}

// Layer numbers come from checkpoint keys too: a hostile or odd name is "no decoder layer",
// never an exception (std::stoi on twelve digits would throw).
TEST(Stages, DecoderLayerOfTakesAnyName)
{
    EXPECT_EQ(decoderLayerOf("decoder.layers.17.mlp.linear_fc1.weight"), 17);
    EXPECT_EQ(decoderLayerOf("decoder.layers.0.x"), 0);
    EXPECT_EQ(decoderLayerOf("decoder.layers.999999999999.x"), -1);
    EXPECT_EQ(decoderLayerOf("decoder.layers.17"), -1);
    EXPECT_EQ(decoderLayerOf("decoder.layers..x"), -1);
    EXPECT_EQ(decoderLayerOf("mtp.layers.0.decoder.layers.3.x"), -1);
    EXPECT_EQ(decoderLayerOf(""), -1);
}

// A layout's numbers are checked before nlohmann converts them (a float cast to an integer is
// undefined) and before sizes are multiplied (found by the layout fuzzer).
TEST(LayoutJson, NumbersThatCannotBeSizesAreErrors)
{
    auto demo = openDemo(1);
    ASSERT_TRUE(demo);
    const nlohmann::json good = nlohmann::json::parse(layoutToJson(demo->layout));
    ASSERT_TRUE(layoutFromJson(good.dump(), "good").ok());

    nlohmann::json floated = good;
    floated["params"][0]["shape"][0] = 1.8446744073709552e22;
    auto r = layoutFromJson(floated.dump(), "floated");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().toString().find("'shape': 1.8446744073709552e+22 where a layout has "
                                        "integers"),
              std::string::npos)
        << r.error().toString();

    // Beyond double's range: nlohmann's parser throws out_of_range, not parse_error.
    std::string text = good.dump();
    text.replace(text.find("\"shape\":[") + 9, 0, "11e308,");
    r = layoutFromJson(text, "beyond double");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().toString().find("number overflow"), std::string::npos)
        << r.error().toString();

    nlohmann::json huge = good;
    huge["params"][0]["shape"][0] = (uint64_t(1) << 63) + 5;
    r = layoutFromJson(huge.dump(), "huge");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().toString().find("beyond any model's size"), std::string::npos);

    // A TP-local fused parameter whose fused dimension times tp overflows int64.
    nlohmann::json fused = good;
    bool found = false;
    for (nlohmann::json &p : fused["params"])
        if (p.contains("fusion") && !found) {
            found = true;
            const size_t dim = p["fusion"]["dim"].get<size_t>();
            p["shape"][dim] = int64_t(1) << 40;
            p["fusion"]["tp_local"] = true;
        }
    ASSERT_TRUE(found);
    fused["parallel"]["tp"] = int64_t(1) << 30;
    r = layoutFromJson(fused.dump(), "fused");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().toString().find("the fused dimension overflows"), std::string::npos)
        << r.error().toString();
}

// The layout is read in one streaming pass (layout/layoutreader.cpp): a field may come in any
// order (a fused TP-local param before the tp that checks it), fields no version reads are
// skipped at any depth, and a field of the wrong type is named by its place.
TEST(LayoutJson, FieldsInAnyOrderAndWrongTypesNamed)
{
    auto demo = openDemo(1);
    ASSERT_TRUE(demo);
    const nlohmann::json good = nlohmann::json::parse(layoutToJson(demo->layout));
    size_t fused = 0;
    while (fused < good["params"].size() && !good["params"][fused].contains("fusion"))
        ++fused;
    ASSERT_LT(fused, good["params"].size());

    // params first, then the rest; the fused param TP-local under tp = 2.
    nlohmann::ordered_json reordered;
    reordered["params"] = good["params"];
    nlohmann::ordered_json &q = reordered["params"][fused];
    const size_t dim = q["fusion"]["dim"].get<size_t>();
    ASSERT_EQ(q["shape"][dim].get<int64_t>() % 2, 0);
    q["shape"][dim] = q["shape"][dim].get<int64_t>() / 2;
    q["fusion"]["tp_local"] = true;
    q["notes"] = {{"deep", {1, {{"x", 2}}, "y"}}};
    for (auto it = good.begin(); it != good.end(); ++it)
        if (it.key() != "params")
            reordered[it.key()] = *it;
    reordered["parallel"]["tp"] = 2;
    reordered["comment"] = {{"params", "not these"}};
    auto r = layoutFromJson(reordered.dump(), "reordered");
    ASSERT_TRUE(r.ok()) << r.error().toString();
    ASSERT_EQ(r->params.size(), demo->layout.params.size());
    EXPECT_EQ(r->parallel.tp, 2);
    EXPECT_TRUE(r->params[fused].fusion->tpLocal);
    EXPECT_EQ(r->params[fused].shape[dim] * 2, demo->layout.params[fused].shape[dim]);
    for (size_t i = 0; i < r->params.size(); ++i)
        if (i != fused) {
            EXPECT_EQ(r->params[i].name, demo->layout.params[i].name);
            EXPECT_EQ(r->params[i].shape, demo->layout.params[i].shape);
            EXPECT_EQ(r->params[i].fusion, demo->layout.params[i].fusion);
        }

    const std::string f = std::to_string(fused);
    const std::vector<std::tuple<std::string, nlohmann::json, std::string>> wrong = {
        {"/params/0/name", 5, "params[0].name': must be a string"},
        {"/params/0/shape", {{"a", 1}}, "params[0].shape': must be an array of integers"},
        {"/params/0/shape", {1, "2"}, "params[0].shape': must be an array of integers"},
        {"/params/0/tp_dim", int64_t(1) << 33, "params[0].tp_dim': must be an integer"},
        {"/params/0/optimizer_state", "no", "params[0].optimizer_state': must be true or false"},
        {"/params/" + f + "/fusion/sections/0/size", "7",
         "params[" + f + "].fusion.sections[0].size': must be an integer"},
        {"/params/" + f + "/fusion/sections/1", 3,
         "params[" + f + "].fusion.sections[1]': must be an object"},
        {"/params/" + f + "/fusion", {1}, "params[" + f + "].fusion': must be an object"},
        {"/params/1", "x", "params[1]': a param needs name and shape"},
        {"/parallel/tp", int64_t(1) << 33, "parallel.tp': out of range"},
    };
    for (const auto &[pointer, value, message] : wrong) {
        nlohmann::json bad = good;
        bad[nlohmann::json::json_pointer(pointer)] = value;
        r = layoutFromJson(bad.dump(), "bad");
        ASSERT_FALSE(r.ok()) << pointer;
        EXPECT_NE(r.error().toString().find(message), std::string::npos)
            << pointer << ": " << r.error().toString();
    }
}
