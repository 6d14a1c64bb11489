// SPDX-License-Identifier: MIT
#include "shardscope/keyfold.h"

#include <shardscope/report.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace shardscope;
using nlohmann::json;

namespace {

std::vector<std::string> patterns(const std::vector<std::string> &names)
{
    std::vector<std::string> out;
    for (const auto &f : foldNames(names))
        out.push_back(f.pattern);
    return out;
}

std::string fc1(int layer, int expert)
{
    return "decoder.layers." + std::to_string(layer) + ".mlp.experts.linear_fc1.weight" +
           std::to_string(expert);
}

std::string diskFc1(int layer, int expert)
{
    return "model.module." + fc1(layer, expert) + "_w";
}

bool contains(const std::string &haystack, std::string_view needle)
{
    return haystack.find(needle) != std::string::npos;
}

// Layers 3..5 with experts 0..3 whose linear_fc1 only a missing handler maps, one renamed
// MTP parameter, one parameter that loads as is, and a couple of stray keys.
DiffResult sampleDiff()
{
    DiffResult d;
    d.checkpoint = "/ckpt/iter_0001000";
    d.against = "layout.json";
    d.format = "megatron_fsdp_dtensor";
    d.options.strictness = Strictness::IgnoreAll;
    d.options.strictLoad = false;
    d.options.disabledRules = {"swiglu"};
    for (int l = 3; l <= 5; ++l)
        for (int e = 0; e < 4; ++e) {
            DiffEntry x;
            x.name = x.param = fc1(l, e);
            x.shape = {4096, 7168};
            x.dtype = "float32";
            x.status = LoadStatus::Unloadable;
            x.realLoadFills = false;
            x.requestKeys = {"model.module." + fc1(l, e)};
            x.sources.push_back({diskFc1(l, e), {2048, 7168}, "float32", 0, 0, 2048});
            x.reason = "the checkpoint stores it as " + diskFc1(l, e) +
                       ", which only rule swiglu maps; in layer " + std::to_string(l);
            x.fix = "checkpoint_inspector.py modify-state-dict IN OUT --op rename " +
                    diskFc1(l, e) + " model.module." + fc1(l, e);
            d.entries.push_back(x);
            d.outcome.keptAtInit.push_back(fc1(l, e));
        }
    DiffEntry mtp;
    mtp.name = mtp.param = "mtp.layers.0.mtp_model_layer.self_attention.linear_proj.weight";
    mtp.shape = {7168, 16384};
    mtp.dtype = "float32";
    mtp.status = LoadStatus::Rename;
    mtp.realLoadFills = false;
    mtp.rules = {"mtp_spelling"};
    mtp.reason = "stored as model.module.mtp.layers.0.transformer_layer.self_attention."
                 "linear_proj.weight (MTP inner layer spelled 'mtp_model_layer')";
    mtp.fix = "Use a Megatron-LM whose handle_mtp_in_state_dict renames it.";
    d.entries.push_back(mtp);
    DiffEntry ok;
    ok.name = ok.param = "embedding.word_embeddings.weight";
    ok.shape = {129280, 7168};
    ok.dtype = "float32";
    d.entries.push_back(ok);
    DiffEntry opt = ok;
    opt.section = Section::Optimizer;
    opt.state = "exp_avg";
    opt.name = ok.name + ".exp_avg";
    opt.status = LoadStatus::Unloadable;
    opt.realLoadFills = false;
    opt.reason = "no optimizer.state.exp_avg for it";
    d.entries.push_back(opt);
    d.outcome.optimizerKeptAtInit = {opt.name};

    for (int l = 0; l < 3; ++l)
        d.unconsumed.push_back({"model.module.decoder.layers." + std::to_string(l) +
                                    ".self_attention.core_attention._extra_state",
                                {},
                                "",
                                false,
                                "not a tensor"});
    d.outcome.action = LoadOutcome::Action::Silent;
    d.outcome.message = "ignore_all: no check; the load finishes and 12 parameters silently keep "
                        "their initial values";
    d.expectedModel = 14;
    d.loadableModel = 1;
    d.expectedOptimizer = 14;
    d.loadableOptimizer = 0;
    return d;
}

const ReportContext kCtx{"shardscope-cli report /ckpt/iter_0001000 --layout layout.json "
                         "--strictness ignore_all --disable-rule swiglu -o report.md",
                         "2025-01-02T03:04:05Z"};

} // namespace

// ---------------------------------------------------------------- folding

TEST(KeyFold, Values)
{
    EXPECT_EQ(foldValues({5}), "5");
    EXPECT_EQ(foldValues({3, 4}), "{3..4}");
    EXPECT_EQ(foldValues({3, 4, 5, 6}), "{3..6}");
    EXPECT_EQ(foldValues({1, 4, 7}), "{1,4,7}");
    EXPECT_EQ(foldValues({0, 1, 2, 3, 7, 9, 10, 11, 12}), "{0..3,7,9..12}");
    EXPECT_EQ(foldValues({1, 2, 5}), "{1,2,5}");
}

TEST(KeyFold, Contiguous)
{
    std::vector<std::string> names;
    for (int l = 3; l <= 60; ++l)
        names.push_back("decoder.layers." + std::to_string(l) + ".mlp.linear_fc2.weight");
    const auto folded = foldNames(names);
    ASSERT_EQ(folded.size(), 1u);
    EXPECT_EQ(folded[0].pattern, "decoder.layers.{3..60}.mlp.linear_fc2.weight");
    EXPECT_EQ(folded[0].members.size(), names.size());
}

TEST(KeyFold, NonContiguous)
{
    EXPECT_EQ(patterns({"decoder.layers.1.x", "decoder.layers.4.x", "decoder.layers.7.x"}),
              (std::vector<std::string>{"decoder.layers.{1,4,7}.x"}));
    // Order does not matter; duplicates share the pattern.
    const auto folded = foldNames({"a.7.b", "a.1.b", "a.4.b", "a.1.b"});
    ASSERT_EQ(folded.size(), 1u);
    EXPECT_EQ(folded[0].pattern, "a.{1,4,7}.b");
    EXPECT_EQ(folded[0].members, (std::vector<size_t>{0, 1, 2, 3}));
}

TEST(KeyFold, MultipleFields)
{
    std::vector<std::string> names;
    for (int l = 3; l <= 60; ++l)
        for (int e = 0; e < 256; ++e)
            names.push_back(fc1(l, e));
    EXPECT_EQ(
        patterns(names),
        (std::vector<std::string>{"decoder.layers.{3..60}.mlp.experts.linear_fc1.weight{0..255}"}));

    // Not a full product: the patterns must not claim layer 4 has experts 4..7.
    names.clear();
    for (int e = 0; e < 8; ++e)
        names.push_back(fc1(3, e));
    for (int e = 0; e < 4; ++e)
        names.push_back(fc1(4, e));
    for (int e = 0; e < 8; ++e)
        names.push_back(fc1(5, e));
    EXPECT_EQ(patterns(names),
              (std::vector<std::string>{"decoder.layers.{3,5}.mlp.experts.linear_fc1.weight{0..7}",
                                        "decoder.layers.4.mlp.experts.linear_fc1.weight{0..3}"}));

    // Sequential experts and SwiGLU sections fold the same way.
    EXPECT_EQ(
        patterns({"l.2.mlp.experts.local_experts.0.linear_fc1.weight",
                  "l.2.mlp.experts.local_experts.1.linear_fc1.weight",
                  "l.3.mlp.experts.local_experts.0.linear_fc1.weight",
                  "l.3.mlp.experts.local_experts.1.linear_fc1.weight"}),
        (std::vector<std::string>{"l.{2..3}.mlp.experts.local_experts.{0..1}.linear_fc1.weight"}));
    EXPECT_EQ(patterns({"x.weight0_w", "x.weight1_w", "x.weight2_w", "x.bias3"}),
              (std::vector<std::string>{"x.weight{0..2}_w", "x.bias3"}));
}

TEST(KeyFold, NamesThatMustNotFoldTogether)
{
    // linear_fc1 / linear_fc2 and model0 / model1 are different modules, not indices.
    EXPECT_EQ(patterns({"d.layers.0.mlp.linear_fc1.weight", "d.layers.0.mlp.linear_fc2.weight"}),
              (std::vector<std::string>{"d.layers.0.mlp.linear_fc1.weight",
                                        "d.layers.0.mlp.linear_fc2.weight"}));
    EXPECT_EQ(patterns({"model0.w", "model1.w"}),
              (std::vector<std::string>{"model0.w", "model1.w"}));
    // Optimizer states and different tails.
    EXPECT_EQ(patterns({"p.1.w.exp_avg", "p.2.w.exp_avg_sq", "p.3.w.exp_avg"}),
              (std::vector<std::string>{"p.{1,3}.w.exp_avg", "p.2.w.exp_avg_sq"}));
    EXPECT_EQ(patterns({"a.1.b", "a.2.c"}), (std::vector<std::string>{"a.1.b", "a.2.c"}));
    EXPECT_EQ(patterns({"a.1.b", "a.1.2.b"}), (std::vector<std::string>{"a.1.b", "a.1.2.b"}));
    // Leading zeros would not print back: they stay text.
    EXPECT_EQ(patterns({"a.03.b", "a.3.b", "a.4.b"}),
              (std::vector<std::string>{"a.03.b", "a.{3..4}.b"}));
    // SwiGLU halves and weight vs bias.
    EXPECT_EQ(patterns({"x.weight0_w", "x.weight0_v", "x.weight1_w", "x.bias1"}),
              (std::vector<std::string>{"x.weight{0..1}_w", "x.weight0_v", "x.bias1"}));
    EXPECT_EQ(patterns({"x.weights1", "x.weights2"}),
              (std::vector<std::string>{"x.weights1", "x.weights2"}));
}

TEST(KeyFold, SplitText)
{
    const auto t =
        splitText("stored as m.layers.3.mlp.weight5_w [4096, 7168] in layer 3. dim 0, expert 12");
    EXPECT_EQ(t.values, (std::vector<int64_t>{3, 5, 3, 12}));
    EXPECT_EQ(t.pieces.front(), "stored as m.layers.");
    EXPECT_EQ(t.pieces[2], "_w [4096, 7168] in layer ");
    EXPECT_EQ(t.pieces[3], ". dim 0, expert ");
    // Prose numbers, versions and flags stay text.
    EXPECT_TRUE(splitText("torch 2.5 with --tp 2, 3 sublayer 4 rows 0..2048").values.empty());
    EXPECT_EQ(splitName("a.10.b.weight7_v").values, (std::vector<int64_t>{10, 7}));
}

// ---------------------------------------------------------------- formats

TEST(Report, FormatForPath)
{
    EXPECT_EQ(reportFormatForPath("out/report.md"), ReportFormat::Markdown);
    EXPECT_EQ(reportFormatForPath("R.HTML"), ReportFormat::Html);
    EXPECT_EQ(reportFormatForPath("r.htm"), ReportFormat::Html);
    EXPECT_EQ(reportFormatForPath("r.json"), ReportFormat::Json);
    EXPECT_FALSE(reportFormatForPath("r.txt"));
    EXPECT_FALSE(reportFormatForPath("report"));
    EXPECT_FALSE(reportFormatForPath("dir.md/report"));
    EXPECT_FALSE(reportFormatForPath(".md"));
}

TEST(Report, MarkdownListsKeptAtInitAndCommand)
{
    const std::string md = renderReport(sampleDiff(), ReportFormat::Markdown, kCtx);
    // The warning comes before the problem list, folded.
    const size_t warn = md.find("silently keep 12 parameters at their initial values");
    ASSERT_NE(warn, std::string::npos) << md;
    const std::string pattern = "decoder.layers.{3..5}.mlp.experts.linear_fc1.weight{0..3}";
    EXPECT_LT(warn, md.find("`" + pattern + "` (12)"));
    EXPECT_LT(md.find("`" + pattern + "` (12)"), md.find("## Problems"));
    EXPECT_TRUE(contains(md, "leave 1 optimizer state at its initial value")) << md;
    EXPECT_TRUE(contains(md, "`embedding.word_embeddings.weight.exp_avg`"));
    // Counts and what the load does.
    EXPECT_TRUE(contains(md, "1 of 14 parameters loadable by a real load"));
    EXPECT_TRUE(contains(md, "`silent`"));
    EXPECT_TRUE(contains(md, "12 parameters silently keep"));
    // The group: folded name, folded cause, the fix as a pattern and one runnable instance.
    EXPECT_TRUE(contains(md, "### 1. `" + pattern + "`"));
    EXPECT_TRUE(contains(md, "`model.module." + pattern +
                                 "_w`, which only rule swiglu maps; "
                                 "in layer {3..5}"))
        << md;
    EXPECT_TRUE(contains(md, "--op rename model.module." + pattern + "_w model.module." + pattern));
    EXPECT_TRUE(contains(md, "--op rename " + diskFc1(3, 0) + " model.module." + fc1(3, 0)));
    EXPECT_TRUE(contains(md, "**On-disk keys:** `model.module." + pattern + "_w` (12)"));
    // The MTP rename is its own group; the parameter that loads is not listed.
    EXPECT_TRUE(contains(md, "mtp_model_layer.self_attention.linear_proj.weight`"));
    EXPECT_FALSE(contains(md, "`embedding.word_embeddings.weight`"));
    // Unconsumed keys fold too.
    EXPECT_TRUE(contains(
        md, "`model.module.decoder.layers.{0..2}.self_attention.core_attention._extra_state` (3)"));
    // The command, last, in a code block.
    const size_t reproduce = md.find("## Reproduce");
    ASSERT_NE(reproduce, std::string::npos);
    EXPECT_TRUE(contains(md.substr(reproduce), "```sh\n" + kCtx.command + "\n```\n"));
}

TEST(Report, MarkdownCodeSpansSurviveBackticksAndPipes)
{
    DiffResult d;
    d.checkpoint = "/ck|pt";
    d.against = "l.json";
    d.outcome.keptAtInit = {"we`ird"};
    d.expectedModel = 1;
    const std::string md = renderReport(d, ReportFormat::Markdown, {"cmd ```", ""});
    EXPECT_TRUE(contains(md, "`/ck\\|pt`"));
    EXPECT_TRUE(contains(md, "``we`ird``"));
    EXPECT_TRUE(contains(md, "````sh\ncmd ```\n````\n"));
}

TEST(Report, HtmlEscapesHostileNames)
{
    DiffResult d = sampleDiff();
    d.checkpoint = "/ckpt/<b>&\"quoted\"";
    d.entries[0].name = "<script>alert(1)</script>.weight";
    d.entries[0].reason = "stored as <script>x</script>";
    d.entries[0].fix = "</pre><script>alert(2)</script>";
    d.outcome.keptAtInit.push_back("<script>alert(3)</script>");
    d.unconsumed.push_back({"<img src=x onerror=alert(4)>", {1}, "float32", true, "<i>"});
    const ReportContext ctx{"shardscope-cli report '<script>'", "<now>"};
    const std::string html = renderReport(d, ReportFormat::Html, ctx);
    EXPECT_FALSE(contains(html, "<script"));
    EXPECT_FALSE(contains(html, "<img"));
    EXPECT_FALSE(contains(html, "<b>"));
    EXPECT_FALSE(contains(html, "<i>"));
    EXPECT_TRUE(contains(html, "&lt;script&gt;alert(1)&lt;/script&gt;.weight"));
    EXPECT_TRUE(contains(html, "&lt;script&gt;alert(3)&lt;/script&gt;"));
    EXPECT_TRUE(contains(html, "/ckpt/&lt;b&gt;&amp;&quot;quoted&quot;"));
    EXPECT_TRUE(contains(html, "shardscope-cli report &#39;&lt;script&gt;&#39;"));

    const std::string md = renderReport(d, ReportFormat::Markdown, ctx);
    EXPECT_TRUE(contains(md, "`<script>alert(1)</script>.weight`")); // literal inside code
    EXPECT_FALSE(contains(md, " <i>"));
}

TEST(Report, HtmlIsSelfContained)
{
    DiffResult d = sampleDiff();
    d.entries[0].name += "\xff\x01"; // not UTF-8, and a control character
    const std::string html = renderReport(d, ReportFormat::Html, kCtx);
    EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_TRUE(contains(html, "<meta charset=\"utf-8\">"));
    EXPECT_TRUE(contains(html, "<style>"));
    for (std::string_view bad :
         {"http://", "https://", "src=", "<script", "<link", "@import", "url(", "\xff", "\x01"})
        EXPECT_FALSE(contains(html, bad)) << bad;
    EXPECT_TRUE(contains(html, "\\xff\\x01")); // shown as escapes in their place
    EXPECT_TRUE(html.ends_with("</html>\n"));
    auto count = [&](std::string_view s) {
        size_t n = 0;
        for (size_t at = html.find(s); at != std::string::npos; at = html.find(s, at + 1))
            ++n;
        return n;
    };
    EXPECT_EQ(count("<details"), count("</details>"));
    EXPECT_EQ(count("<section>"), count("</section>"));
    EXPECT_EQ(count("<code>"), count("</code>"));
    EXPECT_GE(count("<details"), 3u);
    // Summary table, badges, the warning and the command.
    EXPECT_TRUE(contains(html, "class=\"kv\""));
    EXPECT_TRUE(contains(html, "badge b-bad\">unloadable"));
    EXPECT_TRUE(contains(html, "silently keep 12 parameters"));
    EXPECT_TRUE(contains(html, "decoder.layers.{3..5}.mlp.experts.linear_fc1.weight{0..3}"));
    EXPECT_TRUE(contains(html, "<pre><code>shardscope-cli report /ckpt/iter_0001000"));
}

TEST(Report, DiffJsonRoundTrip)
{
    DiffResult d = sampleDiff();
    d.unconsumed.push_back({"stray\xff", {3, 4}, "bfloat16", true, ""});
    const json j = json::parse(diffToJson(d));
    EXPECT_EQ(j["schema"], "shardscope.diff/1");
    EXPECT_EQ(j["checkpoint"], d.checkpoint);
    EXPECT_EQ(j["against"], d.against);
    EXPECT_EQ(j["format"], d.format);
    EXPECT_EQ(j["options"]["strictness"], "ignore_all");
    EXPECT_EQ(j["options"]["strict_load"], false);
    EXPECT_EQ(j["options"]["include_optimizer"], true);
    EXPECT_EQ(j["options"]["disabled_rules"], json::array({"swiglu"}));
    EXPECT_EQ(j["counts"]["expected_model"], 14);
    EXPECT_EQ(j["counts"]["loadable_model"], 1);
    EXPECT_EQ(j["counts"]["expected_optimizer"], 14);
    EXPECT_EQ(j["counts"]["loadable_optimizer"], 0);
    EXPECT_EQ(j["clean"], d.clean());
    EXPECT_EQ(j["outcome"]["action"], "silent");
    EXPECT_EQ(j["outcome"]["message"], d.outcome.message);
    EXPECT_EQ(j["outcome"]["kept_at_init"].size(), 12u);
    EXPECT_EQ(j["outcome"]["optimizer_kept_at_init"][0],
              "embedding.word_embeddings.weight.exp_avg");
    EXPECT_TRUE(j["outcome"]["named_keys"].is_array());
    ASSERT_EQ(j["entries"].size(), d.entries.size());
    const json &e = j["entries"][0];
    EXPECT_EQ(e["section"], "model");
    EXPECT_EQ(e["name"], fc1(3, 0));
    EXPECT_EQ(e["param"], fc1(3, 0));
    EXPECT_EQ(e["state"], "");
    EXPECT_EQ(e["shape"], json::array({4096, 7168}));
    EXPECT_EQ(e["dtype"], "float32");
    EXPECT_EQ(e["status"], "unloadable");
    EXPECT_EQ(e["real_load_fills"], false);
    EXPECT_EQ(e["request_keys"][0], "model.module." + fc1(3, 0));
    EXPECT_EQ(e["reason"], d.entries[0].reason);
    EXPECT_EQ(e["fix"], d.entries[0].fix);
    const json &s = e["sources"][0];
    EXPECT_EQ(s["key"], diskFc1(3, 0));
    EXPECT_EQ(s["shape"], json::array({2048, 7168}));
    EXPECT_EQ(s["dtype"], "float32");
    EXPECT_EQ(s["dim"], 0);
    EXPECT_EQ(s["begin"], 0);
    EXPECT_EQ(s["end"], 2048);
    EXPECT_EQ(j["entries"][12]["rules"], json::array({"mtp_spelling"}));
    EXPECT_EQ(j["entries"][12]["status"], "rename");
    EXPECT_EQ(j["entries"][14]["section"], "optimizer");
    EXPECT_EQ(j["entries"][14]["state"], "exp_avg");
    ASSERT_EQ(j["unconsumed"].size(), 4u);
    EXPECT_EQ(j["unconsumed"][0]["tensor"], false);
    EXPECT_EQ(j["unconsumed"][0]["note"], "not a tensor");
    EXPECT_EQ(j["unconsumed"][3]["key"], "stray\xEF\xBF\xBD"); // invalid UTF-8 replaced
    EXPECT_EQ(j["unconsumed"][3]["shape"], json::array({3, 4}));
    EXPECT_EQ(diffToJson(d).substr(0, 3), "{\n "); // one-space indent

    const json r = json::parse(renderReport(d, ReportFormat::Json, kCtx));
    EXPECT_EQ(r["schema"], "shardscope.report/1");
    EXPECT_EQ(r["command"], kCtx.command);
    EXPECT_EQ(r["generated_at"], kCtx.generatedAt);
    EXPECT_EQ(r["diff"], j);
    EXPECT_EQ(r["summary"]["kept_at_init_total"], 12);
    EXPECT_EQ(r["summary"]["kept_at_init"][0]["pattern"],
              "decoder.layers.{3..5}.mlp.experts.linear_fc1.weight{0..3}");
    EXPECT_EQ(r["summary"]["action"], "silent");
    EXPECT_EQ(r["summary"]["problem_entries"], 14);
    ASSERT_EQ(r["groups"].size(), 3u);
    EXPECT_EQ(r["groups"][0]["pattern"],
              "decoder.layers.{3..5}.mlp.experts.linear_fc1.weight{0..3}");
    EXPECT_EQ(r["groups"][0]["count"], 12);
    EXPECT_EQ(r["groups"][0]["status"], "unloadable");
    EXPECT_EQ(r["groups"][0]["keys_total"], 12);
    EXPECT_EQ(r["groups"][2]["section"], "optimizer");
    EXPECT_EQ(r["unconsumed"][0]["count"], 3);
}

TEST(Report, CheckpointDiff)
{
    CheckpointDiff c;
    c.first = "/ckpt/a";
    c.second = "/ckpt/b";
    c.same = 40;
    for (int l = 0; l < 4; ++l)
        c.changes.push_back(
            {KeyChange::Kind::Renamed, "mtp.layers." + std::to_string(l) + ".transformer_layer.w",
             "mtp.layers." + std::to_string(l) + ".mtp_model_layer.w", "mtp_spelling", ""});
    for (int l : {1, 4, 7})
        c.changes.push_back(
            {KeyChange::Kind::Removed, "d.layers." + std::to_string(l) + ".bias", "", "", ""});
    c.changes.push_back(
        {KeyChange::Kind::ShapeChanged, "emb.weight", "emb.weight", "", "[100, 8] → [128, 8]"});

    const std::string md = renderCheckpointDiffReport(c, ReportFormat::Markdown, kCtx);
    EXPECT_TRUE(contains(md, "| same | 40 |"));
    EXPECT_TRUE(contains(md, "| `renamed` | 4 |"));
    EXPECT_TRUE(contains(md, "| `removed` | 3 |"));
    EXPECT_TRUE(contains(md, "| `added` | 0 |"));
    EXPECT_TRUE(contains(md, "`mtp.layers.{0..3}.transformer_layer.w` → "
                             "`mtp.layers.{0..3}.mtp_model_layer.w` (4), rule `mtp_spelling`"))
        << md;
    EXPECT_TRUE(contains(md, "`d.layers.{1,4,7}.bias` (3)"));
    EXPECT_TRUE(contains(md, "[100, 8] → [128, 8]"));
    // Removed comes before renamed.
    EXPECT_LT(md.find("d.layers.{1,4,7}"), md.find("mtp.layers.{0..3}"));
    EXPECT_TRUE(contains(md, "```sh\n" + kCtx.command + "\n```"));

    const std::string html = renderCheckpointDiffReport(c, ReportFormat::Html, kCtx);
    EXPECT_FALSE(contains(html, "<script"));
    EXPECT_FALSE(contains(html, "http"));
    EXPECT_TRUE(contains(html, "<code>mtp.layers.{0..3}.mtp_model_layer.w</code>"));

    const json j = json::parse(checkpointDiffToJson(c));
    EXPECT_EQ(j["schema"], "shardscope.checkpoint-diff/1");
    EXPECT_EQ(j["same"], 40);
    EXPECT_EQ(j["counts"]["renamed"], 4);
    ASSERT_EQ(j["changes"].size(), 8u);
    EXPECT_EQ(j["changes"][0]["kind"], "renamed");
    EXPECT_EQ(j["changes"][0]["other_key"], "mtp.layers.0.mtp_model_layer.w");
    EXPECT_EQ(j["changes"][0]["rule"], "mtp_spelling");
    const json r = json::parse(renderCheckpointDiffReport(c, ReportFormat::Json, kCtx));
    EXPECT_EQ(r["schema"], "shardscope.report/1");
    EXPECT_EQ(r["diff"], j);
    ASSERT_EQ(r["groups"].size(), 3u);
    EXPECT_EQ(r["groups"][0]["pattern"], "d.layers.{1,4,7}.bias");
}

TEST(Report, CleanAndRaisingLoads)
{
    DiffResult d;
    d.checkpoint = "/ckpt";
    d.against = "layout.json";
    DiffEntry ok;
    ok.name = ok.param = "decoder.layers.0.mlp.linear_fc2.weight";
    d.entries.push_back(ok);
    d.expectedModel = d.loadableModel = 1;
    for (ReportFormat f : {ReportFormat::Markdown, ReportFormat::Html}) {
        const std::string out = renderReport(d, f, kCtx);
        EXPECT_TRUE(contains(out, "No parameter would be left at its initial value"));
        EXPECT_TRUE(contains(out, "every expected parameter loads as is"));
        EXPECT_TRUE(contains(out, "every checkpoint key is used"));
        EXPECT_FALSE(contains(out, "linear_fc2")); // nothing to report about it
    }
    EXPECT_EQ(json::parse(renderReport(d, ReportFormat::Json, kCtx))["groups"].size(), 0u);

    d.outcome.action = LoadOutcome::Action::Raises;
    d.outcome.message = "CheckpointingException (raise_unexpected): 1 model keys are not in the "
                        "checkpoint";
    const std::string md = renderReport(d, ReportFormat::Markdown, kCtx);
    EXPECT_TRUE(contains(md, "A real load would stop with an exception"));
    EXPECT_TRUE(contains(md, "```text\n" + d.outcome.message + "\n```"));
    EXPECT_FALSE(contains(md, "No parameter would be left"));
    const std::string html = renderReport(d, ReportFormat::Html, kCtx);
    EXPECT_TRUE(contains(html, "badge b-bad\">raises"));
    EXPECT_TRUE(contains(html, "<pre><code>CheckpointingException (raise_unexpected)"));
}
