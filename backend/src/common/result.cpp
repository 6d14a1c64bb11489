// SPDX-License-Identifier: MIT
#include "shardscope/result.h"

#include "shardscope/escape.h"

namespace shardscope {

Error makeError(Error::Code code, std::string message)
{
    Error e;
    e.code = code;
    e.message = std::move(message);
    return e;
}

std::string Error::toString() const
{
    std::string out;
    if (!file.empty())
        out += file + ": ";
    if (!key.empty())
        out += "key '" + key + "': ";
    if (offset)
        out += "offset " + std::to_string(*offset) + ": ";
    out += message;
    // One line, always, with nothing a terminal acts on: the file, the key and a message quoting
    // file content come from the checkpoint and must not forge or restyle the CLI's output.
    return visibleText(out);
}

} // namespace shardscope
