// SPDX-License-Identifier: MIT
#include "shardscope/result.h"

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
    // One line, always: a message quoting file content must not break the CLI's output format.
    for (char &c : out)
        if (c == '\n' || c == '\r')
            c = ' ';
    return out;
}

} // namespace shardscope
