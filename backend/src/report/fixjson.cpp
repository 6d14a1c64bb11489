// SPDX-License-Identifier: MIT
// shardscope.fix-result/1: what fix changed, what blocked it, what it wrote, and the diff of the
// output under the same options.
#include "report/reportparts.h"

namespace shardscope {

using report::json;

std::string fixToJson(const FixResult &fix)
{
    json changes = json::array();
    for (const FixChangeCount &c : fix.changes)
        changes.push_back({{"kind", c.kind}, {"count", c.count}, {"examples", c.examples}});
    json unused = json::array();
    for (const FixUnused &u : fix.unused)
        unused.push_back({{"key", u.key}, {"kept", u.kept}, {"why", u.why}});
    json j = {{"schema", "shardscope.fix-result/1"},
              {"checkpoint", fix.checkpoint},
              {"layout", fix.layout},
              {"output", fix.output},
              {"format", fix.format},
              {"already_loads", fix.alreadyLoads},
              {"written", fix.written},
              {"repaired", fix.repaired()},
              {"changes", std::move(changes)},
              {"blockers", fix.blockers},
              {"unused", std::move(unused)},
              {"still_fails", fix.stillFails},
              {"copied_from_outside", fix.copiedFromOutside},
              {"bytes_referenced", fix.bytesReferenced},
              {"bytes_written", fix.bytesWritten},
              {"files_written", fix.filesWritten},
              {"metadata_bytes", fix.metadataBytes},
              {"files",
               {{"hard_linked", fix.filesLinked},
                {"symlinked", fix.filesSymlinked},
                {"copied", fix.filesCopied}}},
              {"diff_command", fix.diffCommand},
              {"verify_command", fix.verifyCommand}};
    j["for_torch"] = fix.forTorch ? json(fix.forTorch->text()) : json(nullptr);
    j["source_torch_readable"] =
        fix.sourceTorch.applies ? report::torchReadableJson(fix.sourceTorch) : json(nullptr);
    j["output_torch_readable"] =
        fix.outputTorch.applies ? report::torchReadableJson(fix.outputTorch) : json(nullptr);
    j["after"] = fix.after ? report::diffJson(*fix.after) : json(nullptr);
    return report::dump(j);
}

} // namespace shardscope
