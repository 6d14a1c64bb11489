// SPDX-License-Identifier: MIT
#include "common/loadmodule.h"

#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <vector>

namespace shardscope::detail {

Result<void *> loadModuleEntry(const char *envVar, const std::string &fileName,
                               const std::string &builtAt, const char *entry)
{
    std::vector<std::string> candidates;
    if (const char *env = std::getenv(envVar))
        candidates.emplace_back(env);
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec)
        candidates.push_back((exe.parent_path() / fileName).string());
    candidates.push_back(builtAt);
    std::string why;
    for (const std::string &path : candidates) {
        if (path.empty() || !std::filesystem::exists(path, ec))
            continue;
        void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            why = ::dlerror();
            continue;
        }
        if (void *address = ::dlsym(handle, entry))
            return address;
        why = path + " lacks " + entry;
    }
    return makeError(Error::Code::Unsupported, why);
}

} // namespace shardscope::detail
