// SPDX-License-Identifier: MIT
#include "snapshots.h"

#include "diffchoices.h"
#include "job.h"
#include "layerstats.h"
#include "tensordetails.h"

namespace shardscope::model {

FoldedProblemsSnapshot foldLoadProblems(const DiffResult &diff)
{
    auto out = std::make_shared<FoldedLoadProblems>();
    for (size_t i = 0; i < diff.entries.size(); ++i)
        if (isLoadProblem(diff.entries[i]))
            out->entries.push_back(i);
    out->groups = foldDiffEntries(diff, out->entries);
    return out;
}

void registerMetaTypes()
{
    qRegisterMetaType<TensorDetails>();
    qRegisterMetaType<ObjectDetails>();
    qRegisterMetaType<IndexSnapshot>();
    qRegisterMetaType<JobInfo>();
    // Names as signal signatures spell them, for string-based (queued) connections.
    qRegisterMetaType<TensorDetails>("shardscope::model::TensorDetails");
    qRegisterMetaType<ObjectDetails>("shardscope::model::ObjectDetails");
    qRegisterMetaType<IndexSnapshot>("shardscope::model::IndexSnapshot");
    qRegisterMetaType<DiffSnapshot>("shardscope::model::DiffSnapshot");
    qRegisterMetaType<VerifySnapshot>("shardscope::model::VerifySnapshot");
    qRegisterMetaType<CompareSnapshot>("shardscope::model::CompareSnapshot");
    qRegisterMetaType<ValuesSnapshot>("shardscope::model::ValuesSnapshot");
    qRegisterMetaType<LayerStatsSnapshot>("shardscope::model::LayerStatsSnapshot");
    qRegisterMetaType<FoldedProblemsSnapshot>("shardscope::model::FoldedProblemsSnapshot");
    qRegisterMetaType<JobInfo>("shardscope::model::JobInfo");
}

} // namespace shardscope::model
