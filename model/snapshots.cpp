// SPDX-License-Identifier: MIT
#include "snapshots.h"

#include "diffchoices.h"
#include "job.h"
#include "layerstats.h"
#include "tensordetails.h"

#include <QThreadPool>

namespace shardscope::model {

namespace {

// One thread frees in order; at exit (the pool gone) the last holder frees in place.
struct FreeingPool : QThreadPool
{
    FreeingPool() { setMaxThreadCount(1); }
};
Q_GLOBAL_STATIC(FreeingPool, s_freeing)

} // namespace

std::shared_ptr<const DiffResult> freedOffThread(DiffResult &&value)
{
    return std::shared_ptr<const DiffResult>(new DiffResult(std::move(value)),
                                             [](const DiffResult *d) {
                                                 QThreadPool *pool = s_freeing();
                                                 if (!pool) {
                                                     delete d;
                                                     return;
                                                 }
                                                 pool->start([d] { delete d; });
                                             });
}

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
