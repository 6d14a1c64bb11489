// SPDX-License-Identifier: MIT
// The report renderers fed with hostile names: whatever the names hold, the JSON parses, the
// HTML gains no element and no output carries a control character a terminal acts on.
#include "fuzzcommon.h"

#include <shardscope/escape.h>
#include <shardscope/report.h>

#include <nlohmann/json.hpp>

#include <cstdlib>

namespace {

bool hasRawControl(std::string_view s)
{
    for (unsigned char c : s)
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
            return true;
    return false;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace shardscope;
    const auto names = fuzz::split({reinterpret_cast<const char *>(data), size}, "\n@\n", 6);
    DiffResult d;
    d.checkpoint = std::string(names[0]);
    d.against = "layout.json";
    d.format = "dcp";
    d.expectedModel = 2;
    DiffEntry e;
    e.name = std::string(names[1]);
    e.param = e.name;
    e.status = LoadStatus::Unloadable;
    e.realLoadFills = false;
    e.reason = "no key " + std::string(names[2]);
    e.fix = "rename " + std::string(names[3]);
    e.sources.push_back({std::string(names[3]), {4}, "float32", {}});
    d.entries.push_back(e);
    DiffEntry ok;
    ok.name = std::string(names[4]);
    ok.param = ok.name;
    d.entries.push_back(ok);
    d.unconsumed.push_back({std::string(names[5]), {3}, "float32", true, "not consumed"});
    d.outcome.action = LoadOutcome::Action::Raises;
    d.outcome.message = "Missing key " + std::string(names[1]);
    d.outcome.keptAtInit = {std::string(names[1])};

    const ReportContext ctx{shellCommand({"shardscope-cli", "report", d.checkpoint}), "now"};
    const std::string md = renderReport(d, ReportFormat::Markdown, ctx);
    const std::string html = renderReport(d, ReportFormat::Html, ctx);
    const std::string json = renderReport(d, ReportFormat::Json, ctx);
    // Line breaks and tabs are the renderer's; nothing else a terminal acts on may be left.
    if (hasRawControl(md) || hasRawControl(html) || visibleLines(md) != md ||
        visibleLines(html) != html)
        std::abort();
    if (!nlohmann::json::accept(json) || !nlohmann::json::accept(diffToJson(d)))
        std::abort();
    // Every element the HTML holds is one the renderer writes: a name brings in none.
    for (const char *tag : {"<script", "<img", "<iframe", "<svg", "<a ", "<object"})
        if (html.find(tag) != std::string::npos)
            std::abort();
    for (auto n : names)
        if (needsEscape(visibleText(n)) || needsEscape(visibleName(n)) ||
            needsEscape(shellQuote(n)))
            std::abort();
    return 0;
}
