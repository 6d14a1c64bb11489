// SPDX-License-Identifier: MIT
#include "checkpointbackend.h"

#include "formatting.h"
#include "pyvalueformat.h"

#include <shardscope/checkpoint.h>
#include <shardscope/tensor.h>

#include <QCoreApplication>
#include <QElapsedTimer>

namespace shardscope::model {

namespace {

QString tr(const char *text)
{
    return QCoreApplication::translate("shardscope", text);
}

class LocalBackend final : public CheckpointBackend
{
public:
    Result<CheckpointIndex> open(const std::string &path, const OpenOptions &options) override
    {
        return openCheckpoint(path, options);
    }

    TensorDetails tensorDetails(const IndexSnapshot &index, const std::string &key,
                                const JobControl &control) override
    {
        QElapsedTimer timer;
        timer.start();
        TensorDetails details;
        details.key = QString::fromStdString(key);
        const TensorEntry *entry = index ? index->findTensor(key) : nullptr;
        if (!entry) {
            details.error =
                index ? tr("no tensor named '%1'").arg(details.key) : tr("no checkpoint is open");
            return details;
        }
        control.report({"read", 0, 3});
        Result<TensorData> data = readTensor(*index, *entry);
        if (!data) {
            details.error = QString::fromStdString(data.error().toString());
            details.elapsedMs = timer.elapsed();
            return details;
        }
        // The one numerics path: the same kernels as `inspect --stats` and `verify`.
        if (!control.report({"statistics", 1, 3}))
            return details;
        Result<TensorHealth> health = tensorHealth(*data);
        if (health) {
            details.hasStats = true;
            details.stats = *health;
        } else {
            details.statsError = QString::fromStdString(health.error().message);
        }
        if (!control.report({"hash", 2, 3}))
            return details;
        details.sha256 = QString::fromStdString(sha256Hex(*data));
        if (details.hasStats && details.stats.finite > 0 && !details.stats.histogram.empty())
            setHistogram(details);
        details.elapsedMs = timer.elapsed();
        return details;
    }

    ObjectDetails objectDetails(const IndexSnapshot &index, const std::string &key) override
    {
        ObjectDetails details;
        details.key = QString::fromStdString(key);
        const ObjectEntry *entry = index ? index->findObject(key) : nullptr;
        if (!entry) {
            details.error =
                index ? tr("no object named '%1'").arg(details.key) : tr("no checkpoint is open");
        } else if (entry->value) {
            details.summary = QString::fromStdString(entry->value->summary(80));
            details.text = formatPyValue(*entry->value);
        } else if (Result<PyValue> value = readObject(*index, *entry)) {
            details.summary = QString::fromStdString(value->summary(80));
            details.text = formatPyValue(*value);
        } else {
            details.error = QString::fromStdString(value.error().toString());
        }
        return details;
    }

    Result<Layout> readLayout(const std::string &path) override
    {
        return shardscope::readLayout(path);
    }
    Result<Layout> layoutFromConfig(const std::string &config,
                                    const LayoutOptions &options) override
    {
        return shardscope::layoutFromConfig(config, options);
    }
    Result<DiffResult> diff(const DiffRequest &request, const JobControl &control) override
    {
        return runDiff(request, control);
    }
    Result<VerifyReport> verify(const VerifyRequest &request, const JobControl &control) override
    {
        return runVerify(request, control);
    }
    Result<CheckpointDiff> compare(const CheckpointDiffRequest &request,
                                   const JobControl &control) override
    {
        return runCheckpointDiff(request, control);
    }
    Result<ValueDiffResult> values(const ValueDiffRequest &request,
                                   const JobControl &control) override
    {
        return runValueDiff(request, control);
    }
    Result<ReportOutput> report(const ReportRequest &request, const JobControl &control) override
    {
        return runReport(request, control);
    }
    Result<FixResult> fix(const FixRequest &request, const JobControl &control) override
    {
        return runFix(request, control);
    }
    Result<InspectResult> inspect(const InspectRequest &request, const JobControl &control) override
    {
        return runInspect(request, control);
    }
};

} // namespace

Result<IndexSnapshot> CheckpointBackend::openShared(const std::string &path,
                                                    const OpenOptions &options, const JobControl &)
{
    Result<CheckpointIndex> index = open(path, options);
    if (!index)
        return index.error();
    return IndexSnapshot(std::make_shared<const CheckpointIndex>(std::move(*index)));
}

std::shared_ptr<CheckpointBackend> localBackend()
{
    return std::make_shared<LocalBackend>();
}

} // namespace shardscope::model
