// SPDX-License-Identifier: MIT
// shardscope.verify/1: what `verify --json` prints and the GUI exports.
#include "shardscope/session.h"

#include <nlohmann/json.hpp>

namespace shardscope {

std::string verifyToJson(const VerifyReport &report)
{
    const VerifyResult &result = report.result;
    const ParallelConfig &pc = report.parallel;
    nlohmann::ordered_json j;
    j["schema"] = "shardscope.verify/1";
    j["checkpoint"] = report.checkpoint;
    j["layout"] = report.layout;
    j["world"] = result.world;
    j["parallel"] = {{"tp", pc.tp}, {"dp", pc.dpShard}, {"pp", pc.pp},
                     {"ep", pc.ep}, {"etp", pc.etp},    {"expert_dp", report.expertDp}};
    j["processes"] = result.processes;
    j["threads"] = result.threads;
    j["backend"] = result.backend.empty() ? "none" : result.backend;
    j["device"] = report.healthDevice();
    j["checked"] = result.checked;
    j["bit_identical"] = result.identical;
    j["mismatched"] = result.mismatched;
    j["round_trip_failures"] = result.roundTripFailures;
    j["kept_initial"] = result.keptInitial;
    j["unreadable"] = result.unreadable;
    j["wrong_source"] = result.wrongSource;
    j["not_checked"] = result.notChecked;
    j["bytes_read"] = result.bytesRead;
    j["seconds"] = result.seconds;
    j["cancelled"] = result.cancelled;
    j["clean"] = result.clean();
    j["proves"] = verifyProves();
    j["does_not_prove"] = verifyDoesNotProve();
    auto params = nlohmann::ordered_json::array();
    for (const ParamCheck &c : result.params)
        params.push_back({{"name", c.name},
                          {"dtype", c.dtype},
                          {"shape", c.shape},
                          {"outcome", outcomeName(c.outcome)},
                          {"mismatches", c.mismatches},
                          {"first_mismatch", c.firstMismatch},
                          {"round_trip", c.roundTrip},
                          {"ranks", c.ranksHolding},
                          {"fingerprint", c.fingerprint},
                          {"sha256", c.sha256},
                          {"device", c.health.device},
                          {"stats",
                           {{"min", c.health.min},
                            {"max", c.health.max},
                            {"mean", c.health.mean},
                            {"std", c.health.std},
                            {"l2", c.health.l2},
                            {"nan", c.health.nanCount},
                            {"inf", c.health.posInfCount + c.health.negInfCount},
                            {"denormal", c.health.denormalCount},
                            {"histogram", c.health.histogram}}},
                          {"note", c.note}});
    j["params"] = std::move(params);
    return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

} // namespace shardscope
