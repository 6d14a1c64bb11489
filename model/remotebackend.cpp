// SPDX-License-Identifier: MIT
#include "remotebackend.h"

#include "formatting.h"
#include "pyvalueformat.h"

#include <QCoreApplication>
#include <QElapsedTimer>

namespace shardscope::model {

namespace {

QString tr(const char *text)
{
    return QCoreApplication::translate("shardscope", text);
}

// A request's layout is a file here: read here and sent with it (the server never reads a path
// of this machine). An unreadable one fails the request as a local run would.
template<typename Request>
Status withLayout(Request &r)
{
    if (r.openedLayout || r.layout.empty())
        return Ok{};
    auto layout = shardscope::readLayout(r.layout);
    if (!layout)
        return layout.error();
    r.openedLayout = std::make_shared<const Layout>(std::move(*layout));
    return Ok{};
}

} // namespace

RemoteBackend::RemoteBackend(RemoteTarget target, RemoteConnectOptions options,
                             std::shared_ptr<RemoteSession> session)
    : m_target(std::move(target))
    , m_options(std::move(options))
    , m_session(std::move(session))
{}

Result<std::shared_ptr<RemoteBackend>> RemoteBackend::connect(const RemoteTarget &target,
                                                              const RemoteConnectOptions &options)
{
    auto session = RemoteSession::connect(target, options);
    if (!session)
        return session.error();
    return std::shared_ptr<RemoteBackend>(new RemoteBackend(target, options, *session));
}

QString RemoteBackend::location() const
{
    return QString::fromStdString(m_target.name());
}

std::shared_ptr<RemoteSession> RemoteBackend::session() const
{
    std::lock_guard lock(m_mutex);
    return m_session;
}

void RemoteBackend::setLaunch(const RemoteLaunch &launch)
{
    std::lock_guard lock(m_mutex);
    m_launch = launch;
}

bool RemoteBackend::connected() const
{
    return session()->connected();
}

Status RemoteBackend::reconnect()
{
    auto fresh = RemoteSession::connect(m_target, m_options);
    if (!fresh)
        return fresh.error();
    std::lock_guard lock(m_mutex);
    m_session = *fresh;
    m_opened.clear(); // the new server holds none of them
    return Ok{};
}

OpenedIndex RemoteBackend::openedAt(const std::string &path) const
{
    std::lock_guard lock(m_mutex);
    auto it = m_opened.find(path);
    return it == m_opened.end() ? nullptr : it->second.lock();
}

Result<IndexSnapshot> RemoteBackend::openShared(const std::string &path, const OpenOptions &options,
                                                const JobControl &control)
{
    // The server opens it as the CLI there would (its persistent index, the integrity checks).
    // Where its persistent index holds the metadata as it is now, the keys come first (the
    // tree is shown while the server checks the data files), then the whole index.
    auto s = session();
    auto index = s->open(path, control, options.onKeysKnown);
    if (!index)
        return index.error();
    std::lock_guard lock(m_mutex);
    if (m_session == s)
        m_opened[path] = *index;
    return IndexSnapshot(*index);
}

Result<CheckpointIndex> RemoteBackend::open(const std::string &path, const OpenOptions &options)
{
    auto index = openShared(path, options, {});
    if (!index)
        return index.error();
    return CheckpointIndex(**index);
}

TensorDetails RemoteBackend::tensorDetails(const IndexSnapshot &index, const std::string &key,
                                           const JobControl &control)
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
    control.report({"read", 0, 1});
    // Read, its health computed and hashed where the data is; the histogram drawn here.
    auto remote = session()->tensorDetails(index, *entry, control);
    details.elapsedMs = timer.elapsed();
    if (!remote) {
        details.error = QString::fromStdString(remote.error().toString());
        return details;
    }
    if (remote->health) {
        details.hasStats = true;
        details.stats = *remote->health;
    } else {
        details.statsError = QString::fromStdString(remote->healthError);
    }
    details.sha256 = QString::fromStdString(remote->sha256);
    if (details.hasStats && details.stats.finite > 0 && !details.stats.histogram.empty())
        setHistogram(details);
    return details;
}

ObjectDetails RemoteBackend::objectDetails(const IndexSnapshot &index, const std::string &key)
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
    } else if (Result<PyValue> value = session()->readObject(index, *entry)) {
        details.summary = QString::fromStdString(value->summary(80));
        details.text = formatPyValue(*value);
    } else {
        details.error = QString::fromStdString(value.error().toString());
    }
    return details;
}

// Layouts and configs are the user's files here; the layout travels with each request.
Result<Layout> RemoteBackend::readLayout(const std::string &path)
{
    return shardscope::readLayout(path);
}

Result<Layout> RemoteBackend::layoutFromConfig(const std::string &config,
                                               const LayoutOptions &options)
{
    return shardscope::layoutFromConfig(config, options);
}

Result<DiffResult> RemoteBackend::diff(const DiffRequest &request, const JobControl &control)
{
    DiffRequest r = request;
    if (auto s = withLayout(r); !s)
        return s.error();
    return session()->runDiff(r, control);
}

Result<VerifyReport> RemoteBackend::verify(const VerifyRequest &request, const JobControl &control)
{
    RemoteLaunch launch;
    {
        std::lock_guard lock(m_mutex);
        launch = m_launch;
    }
    VerifyRequest r = request;
    if (auto s = withLayout(r); !s)
        return s.error();
    return session()->runVerify(r, control, launch);
}

Result<CheckpointDiff> RemoteBackend::compare(const CheckpointDiffRequest &request,
                                              const JobControl &control)
{
    return session()->runCheckpointDiff(request, control);
}

Result<ValueDiffResult> RemoteBackend::values(const ValueDiffRequest &request,
                                              const JobControl &control)
{
    ValueDiffRequest r = request;
    if (auto s = withLayout(r); !s)
        return s.error();
    return session()->runValueDiff(r, control);
}

Result<ReportOutput> RemoteBackend::report(const ReportRequest &request, const JobControl &control)
{
    ReportRequest r = request;
    if (r.diff)
        if (auto s = withLayout(*r.diff); !s)
            return s.error();
    if (r.values)
        if (auto s = withLayout(*r.values); !s)
            return s.error();
    return session()->runReport(r, control);
}

Result<FixResult> RemoteBackend::fix(const FixRequest &request, const JobControl &control)
{
    FixRequest r = request;
    if (auto s = withLayout(r); !s)
        return s.error();
    return session()->runFix(r, control);
}

Result<InspectResult> RemoteBackend::inspect(const InspectRequest &request,
                                             const JobControl &control)
{
    InspectRequest r = request;
    if (!r.opened)
        r.opened = openedAt(r.path); // the server's open index, not a second open there
    return session()->runInspect(r, control);
}

} // namespace shardscope::model
