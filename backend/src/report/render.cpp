// SPDX-License-Identifier: MIT
// The public entry points of shardscope/report.h: one per output, dispatching by format.
#include "report/reportparts.h"

#include "shardscope/escape.h"

namespace shardscope {

namespace {

std::string lower(std::string_view s)
{
    std::string out(s);
    for (char &c : out)
        if (c >= 'A' && c <= 'Z')
            c = char(c - 'A' + 'a');
    return out;
}

} // namespace

std::string shellCommand(const std::vector<std::string> &argv)
{
    std::string out;
    for (size_t i = 0; i < argv.size(); ++i)
        out += (i ? " " : "") + shellQuote(argv[i]);
    return out;
}

std::optional<ReportFormat> reportFormatForPath(std::string_view path)
{
    const size_t slash = path.find_last_of("/\\");
    const std::string_view file = slash == std::string_view::npos ? path : path.substr(slash + 1);
    const size_t dot = file.rfind('.');
    if (dot == std::string_view::npos || dot == 0)
        return std::nullopt;
    const std::string ext = lower(file.substr(dot + 1));
    if (ext == "md")
        return ReportFormat::Markdown;
    if (ext == "html" || ext == "htm")
        return ReportFormat::Html;
    if (ext == "json")
        return ReportFormat::Json;
    return std::nullopt;
}

std::string renderReport(const DiffResult &diff, ReportFormat format, const ReportContext &ctx)
{
    switch (format) {
    case ReportFormat::Markdown:
        return report::markdownReport(diff, ctx);
    case ReportFormat::Html:
        return report::htmlReport(diff, ctx);
    case ReportFormat::Json:
        return report::jsonReport(diff, ctx);
    }
    return {};
}

std::string renderCheckpointDiffReport(const CheckpointDiff &diff, ReportFormat format,
                                       const ReportContext &ctx, const ValueDiffResult *values)
{
    switch (format) {
    case ReportFormat::Markdown:
        return report::markdownCheckpointReport(diff, ctx, values);
    case ReportFormat::Html:
        return report::htmlCheckpointReport(diff, ctx, values);
    case ReportFormat::Json:
        return report::jsonCheckpointReport(diff, ctx, values);
    }
    return {};
}

std::string diffToJson(const DiffResult &diff)
{
    return report::dump(report::diffJson(diff));
}

std::string checkpointDiffToJson(const CheckpointDiff &diff)
{
    return report::dump(report::checkpointDiffJson(diff));
}

} // namespace shardscope
