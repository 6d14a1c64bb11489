// SPDX-License-Identifier: MIT
// What the harnesses share: the input as files in a scratch directory of this process (the
// readers take paths, as they do in the product), and a walk over what was read so that the
// code behind an index (object decoding, chunk geometry, integrity checks) runs too.
#pragma once

#include <shardscope/checkpoint.h>
#include <shardscope/pyvalue.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace shardscope::fuzz {

inline const std::filesystem::path &scratch()
{
    static const std::filesystem::path dir = [] {
        const char *shm = "/dev/shm";
        std::filesystem::path base = std::filesystem::exists(shm)
                                         ? std::filesystem::path(shm)
                                         : std::filesystem::temp_directory_path();
        auto d = base / ("shardscope-fuzz-" + std::to_string(getpid()));
        std::filesystem::create_directories(d);
        return d;
    }();
    return dir;
}

inline std::string writeFile(const std::string &relative, std::string_view bytes)
{
    const std::filesystem::path p = scratch() / relative;
    std::filesystem::create_directories(p.parent_path());
    if (FILE *f = std::fopen(p.c_str(), "wb")) {
        std::fwrite(bytes.data(), 1, bytes.size(), f);
        std::fclose(f);
    }
    return p.string();
}

inline void clearScratch()
{
    std::error_code ec;
    for (const auto &e : std::filesystem::directory_iterator(scratch(), ec))
        std::filesystem::remove_all(e.path(), ec);
}

/** The input cut at each `separator`, at most `parts` pieces (the last takes the rest). */
inline std::vector<std::string_view> split(std::string_view in, std::string_view separator,
                                           size_t parts)
{
    std::vector<std::string_view> out;
    while (out.size() + 1 < parts) {
        const size_t at = in.find(separator);
        if (at == std::string_view::npos)
            break;
        out.push_back(in.substr(0, at));
        in.remove_prefix(at + separator.size());
    }
    out.push_back(in);
    while (out.size() < parts)
        out.emplace_back();
    return out;
}

/** Everything a user can ask of an opened checkpoint without tensor data. */
inline void exercise(const CheckpointIndex &index)
{
    volatile uint64_t sink = 0;
    for (const TensorEntry &t : index.tensors) {
        sink = sink + t.nbytes() + t.chunks.size();
        for (size_t c = 0; c < t.chunks.size(); ++c)
            if (t.chunkDims.size() >= (c + 1) * 2 * t.shape.size())
                sink = sink + t.chunkOffsets(c).size() + t.chunkSizes(c).size();
    }
    for (const ObjectEntry &o : index.objects) {
        auto v = readObject(index, o);
        if (v)
            sink = sink + v->summary(80).size();
    }
    sink = sink + checkIntegrity(index).size();
    for (const Problem &p : index.problems)
        sink = sink + p.toString().size();
    (void)sink;
}

inline void openAndExercise(const std::string &path)
{
    for (bool integrity : {true, false}) {
        OpenOptions options;
        options.checkIntegrity = integrity;
        options.useCache = false; // the index cache has a harness of its own
        auto index = openCheckpoint(path, options);
        if (index)
            exercise(*index);
        else
            (void)index.error().toString();
    }
}

} // namespace shardscope::fuzz
