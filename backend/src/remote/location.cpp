// SPDX-License-Identifier: MIT
// A checkpoint on another host named in one argument (RemoteLocation), and where a repair
// writes the layout that travelled with it.
#include "shardscope/escape.h"
#include "shardscope/remote.h"

namespace shardscope {

std::optional<Result<RemoteLocation>> RemoteLocation::parse(std::string_view text)
{
    auto refuse = [&](const std::string &why) {
        return std::optional<Result<RemoteLocation>>(
            makeError(Error::Code::Format, visibleName(std::string(text)) + ": " + why));
    };
    std::string_view destination, path;
    if (text.starts_with("ssh://")) {
        const std::string_view rest = text.substr(6);
        const size_t slash = rest.find('/');
        if (slash == std::string_view::npos || slash + 1 == rest.size())
            return refuse("no path after the host (ssh://HOST/PATH)");
        destination = rest.substr(0, slash);
        path = rest.substr(slash);
    } else {
        // scp's form: a host before the first ":/", with no '/' in it.
        const size_t colon = text.find(":/");
        if (colon == std::string_view::npos || colon == 0 ||
            text.substr(0, colon).find('/') != std::string_view::npos)
            return std::nullopt;
        destination = text.substr(0, colon);
        path = text.substr(colon + 1);
    }
    auto target = RemoteTarget::parse(destination);
    if (!target)
        return refuse(target.error().message);
    if (path.find('\0') != std::string_view::npos)
        return refuse("a path holds no NUL");
    return Result<RemoteLocation>(RemoteLocation{std::move(*target), std::string(path)});
}

std::string RemoteLocation::name() const
{
    return target.name() + ":" + path;
}

std::string layoutBesideOutput(const std::string &output)
{
    std::string base = output;
    while (base.size() > 1 && base.back() == '/')
        base.pop_back();
    return base + ".layout.json";
}

} // namespace shardscope
