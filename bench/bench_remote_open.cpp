// SPDX-License-Identifier: MIT
// The remote open against the local one, in one run (bench/remote_bench.py starts the sshd and
// says where): a DCP .metadata opened here (decoded; then from the persistent index) and
// through RemoteSession (the server decodes it, then reads its own index; the index travels
// compressed each time), with the bytes the protocol moved; and one tensor's statistics and
// hash here and through the session. Prints one JSON object.
// Usage: bench_remote_open DIR HOST SERVER [DATA_CHECKPOINT]
#include <shardscope/checkpoint.h>
#include <shardscope/remote.h>
#include <shardscope/session.h>
#include <shardscope/tensor.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>

using namespace shardscope;

namespace {

double since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

int main(int argc, char **argv)
{
    if (auto code = runAskpassHelper(argc, argv))
        return *code;
    if (argc < 4) {
        std::cerr << "usage: bench_remote_open DIR HOST SERVER [DATA_CHECKPOINT]\n";
        return 2;
    }
    const std::string dir = argv[1];
    nlohmann::json out;
    out["metadata_bytes"] = std::filesystem::file_size(std::filesystem::path(dir) / ".metadata");

    // Here: decoded (the persistent index off), then from the persistent index.
    OpenOptions options; // as the window and the server open it: the integrity checks on
    double keysKnown = -1;
    auto t0 = std::chrono::steady_clock::now();
    options.useCache = false;
    options.onKeysKnown = [&](const CheckpointIndex &) { keysKnown = since(t0); };
    auto local = openCheckpoint(dir, options);
    out["local_decoded_seconds"] = since(t0);
    out["local_keys_known_seconds"] = keysKnown;
    if (!local) {
        std::cerr << local.error().toString() << "\n";
        return 2;
    }
    out["chunks"] = local->chunkCount();
    options.useCache = true;
    options.onKeysKnown = nullptr;
    (void)openCheckpoint(dir, options); // writes the entry
    waitForIndexWrites();
    double cached = 1e300;
    for (int i = 0; i < 3; ++i) {
        t0 = std::chrono::steady_clock::now();
        auto again = openCheckpoint(dir, options);
        cached = std::min(cached, since(t0));
    }
    out["local_cached_seconds"] = cached;
    local = makeError(Error::Code::Internal, "freed");

    // There: connect, then open twice (the server decodes, then reads its own index).
    RemoteTarget target;
    target.host = argv[2];
    target.server = argv[3];
    t0 = std::chrono::steady_clock::now();
    auto session = RemoteSession::connect(target);
    if (!session) {
        std::cerr << session.error().toString() << "\n";
        return 2;
    }
    out["connect_seconds"] = since(t0);
    const RemoteSession &s = **session;
    // First: the server decodes (its persistent index is empty), this side keeps what came;
    // then the server reads its own index and sends it (this side's kept one set aside);
    // then it is this side's kept one, and only the header travels.
    for (const char *name : {"remote_first_open", "remote_cached_open", "remote_reopen"}) {
        if (std::string(name) == "remote_cached_open")
            ::setenv("SHARDSCOPE_NO_CACHE", "1", 1); // this side keeps nothing, holds nothing
        if (std::string(name) == "remote_reopen")
            ::unsetenv("SHARDSCOPE_NO_CACHE");
        const uint64_t before = s.bytesReceived();
        double receiving = -1;
        JobControl control;
        t0 = std::chrono::steady_clock::now();
        control.progress = [&](const JobProgress &p) {
            if (p.stage == "receive" && receiving < 0)
                receiving = since(t0);
            return true;
        };
        double keys = -1; // when the window paints the tree: the keys, or the whole index
        auto index =
            (*session)->open(dir, control, [&](const CheckpointIndex &) { keys = since(t0); });
        const double seconds = since(t0);
        if (!index) {
            std::cerr << index.error().toString() << "\n";
            return 2;
        }
        out[name] = {{"seconds", seconds},
                     {"first_paint_seconds", keys >= 0 ? keys : seconds},
                     {"bytes_received", s.bytesReceived() - before},
                     {"first_bytes_seconds", receiving},
                     {"chunks", (*index)->chunkCount()}};
        if (std::string(name) == "remote_cached_open") {
            // A tensor's statistics of this index: its data files are sparse stand-ins, so the
            // round trip alone (the key found among 650,000, the read refused, the error back).
            const TensorEntry &middle = (*index)->tensors[(*index)->tensors.size() / 2];
            double best = 1e300;
            for (int i = 0; i < 5; ++i) {
                t0 = std::chrono::steady_clock::now();
                (void)(*session)->tensorDetails(*index, middle);
                best = std::min(best, since(t0));
            }
            out["remote_tensor_round_trip_seconds"] = best;
        }
    }
    {
        // The reopen again, best of three as the local cached open is (the kept file's mapping
        // made once per process, as the local entry's is).
        double best = out["remote_reopen"]["first_paint_seconds"].get<double>();
        for (int i = 0; i < 2; ++i) {
            double keys = -1;
            t0 = std::chrono::steady_clock::now();
            auto index =
                (*session)->open(dir, {}, [&](const CheckpointIndex &) { keys = since(t0); });
            const double seconds = since(t0);
            if (!index) {
                std::cerr << index.error().toString() << "\n";
                return 2;
            }
            best = std::min(best, keys >= 0 ? keys : seconds);
        }
        out["remote_reopen_best_first_paint_seconds"] = best;
    }
    if (argc > 4) { // a checkpoint with data: one tensor's statistics and hash, here and there
        auto here = openCheckpoint(argv[4]);
        auto there = (*session)->open(argv[4]);
        if (!here || !there) {
            std::cerr << "cannot open " << argv[4] << "\n";
            return 2;
        }
        size_t biggestAt = 0;
        for (size_t i = 0; i < here->tensors.size(); ++i)
            if (here->tensors[i].nbytes() > here->tensors[biggestAt].nbytes())
                biggestAt = i;
        const TensorEntry *biggest = &here->tensors[biggestAt];
        double localBest = 1e300, remoteBest = 1e300;
        for (int i = 0; i < 5; ++i) {
            t0 = std::chrono::steady_clock::now();
            auto data = readTensor(*here, *biggest);
            auto h = tensorHealth(*data);
            const std::string sha = sha256Hex(*data);
            localBest = std::min(localBest, since(t0));
            t0 = std::chrono::steady_clock::now();
            auto d = (*session)->tensorDetails(*there, (*there)->tensors[biggestAt]);
            remoteBest = std::min(remoteBest, since(t0));
            if (!d || d->sha256 != sha) {
                std::cerr << "the remote statistics differ\n";
                return 2;
            }
        }
        out["tensor"] = {{"key", biggest->key.str()},
                         {"bytes", biggest->nbytes()},
                         {"local_read_and_stats_seconds", localBest},
                         {"remote_seconds", remoteBest},
                         {"remote_overhead_seconds", remoteBest - localBest}};
    }
    out["bytes_sent"] = s.bytesSent();
    std::cout << out.dump() << "\n";
    return 0;
}
