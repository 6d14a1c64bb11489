// SPDX-License-Identifier: MIT
#include "remoteconnect.h"

#include "mainwindow.h"
#include "remotebrowser.h"

#include <QApplication>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QEventLoop>
#include <QFile>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLineEdit>
#include <QMessageBox>
#include <QPointer>
#include <QProgressDialog>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QTextStream>
#include <QTimer>

#include <atomic>
#include <thread>

namespace shardscope::gui {

namespace {

// ssh's prompts, asked on the GUI thread while the connecting thread waits.
std::optional<std::string> askInWindow(QWidget *parent, const QString &host,
                                       const std::string &prompt)
{
    std::optional<std::string> answer;
    QMetaObject::invokeMethod(
        qApp,
        [&] {
            const QString text = QString::fromStdString(prompt).trimmed();
            // A new host key: ssh asks yes/no and wants the word.
            if (text.contains(QStringLiteral("(yes/no"))) {
                const auto b =
                    QMessageBox::question(parent, QObject::tr("Connect to %1").arg(host), text,
                                          QMessageBox::Yes | QMessageBox::No, QMessageBox::No);
                answer = std::string(b == QMessageBox::Yes ? "yes" : "no");
                return;
            }
            bool ok = false;
            const QString typed = QInputDialog::getText(
                parent, QObject::tr("Connect to %1").arg(host), text, QLineEdit::Password, {}, &ok);
            if (ok)
                answer = typed.toStdString();
        },
        Qt::BlockingQueuedConnection);
    return answer;
}

} // namespace

std::shared_ptr<model::RemoteBackend> connectRemote(QWidget *parent, const RemoteTarget &target,
                                                    QString *error)
{
    const QString host = QString::fromStdString(target.name());
    QProgressDialog progress(QObject::tr("Connecting to %1 (ssh, then %2 serve there)…")
                                 .arg(host, QString::fromStdString(target.server)),
                             QObject::tr("Cancel"), 0, 0, parent);
    progress.setWindowTitle(QObject::tr("Open Remote"));
    progress.setMinimumDuration(300);
    CancelToken cancel;
    QObject::connect(&progress, &QProgressDialog::canceled, [&] { cancel.cancel(); });
    RemoteConnectOptions options;
    options.control.cancel = cancel;
    QPointer<QWidget> owner(parent);
    options.askpass = [owner, host](const std::string &prompt) {
        return askInWindow(owner.data(), host, prompt);
    };
    Result<std::shared_ptr<model::RemoteBackend>> result =
        makeError(Error::Code::Internal, "not connected");
    std::atomic<bool> done{false};
    QEventLoop loop;
    std::thread worker([&] {
        result = model::RemoteBackend::connect(target, options);
        done = true;
        QMetaObject::invokeMethod(&loop, &QEventLoop::quit, Qt::QueuedConnection);
    });
    if (!done)
        loop.exec();
    worker.join();
    progress.reset();
    if (!result) {
        if (error)
            *error = QString::fromStdString(result.error().message);
        return nullptr;
    }
    return *result;
}

model::CheckpointSession::RemoteConnector windowConnector(QWidget *parent)
{
    QPointer<QWidget> owner(parent);
    return
        [owner](const RemoteTarget &target) -> Result<std::shared_ptr<model::CheckpointBackend>> {
            // Called on the compare job's thread: the prompts go to the GUI thread (askInWindow).
            RemoteConnectOptions options;
            const QString host = QString::fromStdString(target.name());
            options.askpass = [owner, host](const std::string &prompt) {
                return askInWindow(owner.data(), host, prompt);
            };
            // A location names no server: the one last used with that host (Open Remote…'s).
            RemoteTarget with = target;
            if (with.server == RemoteTarget().server)
                with.server = remoteServerFor(host).toStdString();
            auto connected = model::RemoteBackend::connect(with, options);
            if (!connected)
                return connected.error();
            return std::shared_ptr<model::CheckpointBackend>(*connected);
        };
}

QStringList sshConfigHosts()
{
    QStringList hosts;
    QFile f(QDir::home().filePath(QStringLiteral(".ssh/config")));
    if (!f.open(QIODevice::ReadOnly | QIODevice::Text))
        return hosts;
    QTextStream in(&f);
    static const QRegularExpression hostLine(QStringLiteral("^\\s*Host\\s+(.*)$"),
                                             QRegularExpression::CaseInsensitiveOption);
    while (!in.atEnd()) {
        const auto m = hostLine.match(in.readLine());
        if (!m.hasMatch())
            continue;
        for (const QString &h :
             m.captured(1).split(QRegularExpression(QStringLiteral("\\s+")), Qt::SkipEmptyParts))
            if (!h.contains(QLatin1Char('*')) && !h.contains(QLatin1Char('?')) &&
                !h.startsWith(QLatin1Char('!')) && !hosts.contains(h))
                hosts << h;
    }
    return hosts;
}

QStringList recentRemoteLocations()
{
    return QSettings().value(QStringLiteral("recentRemote")).toStringList();
}

void addRecentRemoteLocation(const QString &host, const QString &path, const QString &server)
{
    QSettings settings;
    QStringList recent = settings.value(QStringLiteral("recentRemote")).toStringList();
    const QString where = host + QLatin1Char(':') + path;
    recent.removeAll(where);
    recent.prepend(where);
    while (recent.size() > 10)
        recent.removeLast();
    settings.setValue(QStringLiteral("recentRemote"), recent);
    settings.setValue(QStringLiteral("remoteServer/") + host, server);
}

QString remoteServerFor(const QString &host)
{
    return QSettings()
        .value(QStringLiteral("remoteServer/") + host, QStringLiteral("shardscope-cli"))
        .toString();
}

RemoteLaunch remoteLaunchFor(const QString &host)
{
    QSettings settings;
    settings.beginGroup(QStringLiteral("remoteLaunch/") + host);
    RemoteLaunch l;
    const int which = settings.value(QStringLiteral("launcher"), 0).toInt();
    if (which >= int(RemoteLaunch::Launcher::None) &&
        which <= int(RemoteLaunch::Launcher::Torchrun))
        l.launcher = RemoteLaunch::Launcher(which);
    l.nodes = std::max(1, settings.value(QStringLiteral("nodes"), 1).toInt());
    l.ranks = std::max(1, settings.value(QStringLiteral("ranks"), 1).toInt());
    l.partition = settings.value(QStringLiteral("partition")).toString().toStdString();
    l.timeLimit = settings.value(QStringLiteral("time")).toString().toStdString();
    l.account = settings.value(QStringLiteral("account")).toString().toStdString();
    l.backend = settings.value(QStringLiteral("collectives"), QStringLiteral("auto"))
                    .toString()
                    .toStdString();
    return l;
}

void setRemoteLaunchFor(const QString &host, const RemoteLaunch &launch)
{
    QSettings settings;
    settings.beginGroup(QStringLiteral("remoteLaunch/") + host);
    settings.setValue(QStringLiteral("launcher"), int(launch.launcher));
    settings.setValue(QStringLiteral("nodes"), launch.nodes);
    settings.setValue(QStringLiteral("ranks"), launch.ranks);
    settings.setValue(QStringLiteral("partition"), QString::fromStdString(launch.partition));
    settings.setValue(QStringLiteral("time"), QString::fromStdString(launch.timeLimit));
    settings.setValue(QStringLiteral("account"), QString::fromStdString(launch.account));
    settings.setValue(QStringLiteral("collectives"), QString::fromStdString(launch.backend));
}

namespace {

RemoteTarget targetFor(const QString &host, const QString &server, QString *error)
{
    auto target = RemoteTarget::parse(host.toStdString());
    if (!target) {
        *error = QString::fromStdString(target.error().message);
        return {};
    }
    target->server = server.isEmpty() ? std::string("shardscope-cli") : server.toStdString();
    return *target;
}

} // namespace

void openRemoteWindow(const std::shared_ptr<model::RemoteBackend> &backend, const QString &host,
                      const QString &path, const QString &server)
{
    addRecentRemoteLocation(host, path, server);
    auto *window = new MainWindow(backend);
    window->setAttribute(Qt::WA_DeleteOnClose);
    window->show();
    window->openPath(path);
}

void openRemoteWindow(QWidget *parent, const QString &host, const QString &path,
                      const QString &server)
{
    QString error;
    const RemoteTarget target = targetFor(host, server, &error);
    auto backend = error.isEmpty() ? connectRemote(parent, target, &error) : nullptr;
    if (!backend) {
        QMessageBox::warning(parent, QObject::tr("Open Remote"), error);
        return;
    }
    openRemoteWindow(backend, host, path, server);
}

OpenRemoteDialog::OpenRemoteDialog(QWidget *parent, const QString &initial)
    : QDialog(parent)
    , m_host(new QComboBox(this))
    , m_path(new QComboBox(this))
    , m_server(new QLineEdit(this))
    , m_browse(new QPushButton(tr("&Browse…"), this))
{
    setWindowTitle(tr("Open Remote"));
    auto *form = new QFormLayout(this);
    m_host->setObjectName(QStringLiteral("host"));
    m_host->setEditable(true);
    QStringList hosts;
    for (const QString &where : recentRemoteLocations())
        if (const QString h = where.section(QLatin1Char(':'), 0, 0); !hosts.contains(h))
            hosts << h;
    for (const QString &h : sshConfigHosts())
        if (!hosts.contains(h))
            hosts << h;
    m_host->addItems(hosts);
    m_host->setToolTip(tr("[user@]host[:port], or a Host of ~/.ssh/config; ssh connects as it "
                          "would from a terminal"));
    m_path->setObjectName(QStringLiteral("path"));
    m_path->setEditable(true);
    m_path->setMinimumContentsLength(40);
    m_path->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_server->setObjectName(QStringLiteral("server"));
    m_browse->setObjectName(QStringLiteral("browse"));
    m_browse->setToolTip(tr("Connect and list the host's directories (the connection is kept "
                            "for Open)"));
    connect(m_browse, &QPushButton::clicked, this, &OpenRemoteDialog::browse);
    connect(m_host, &QComboBox::currentTextChanged, this, &OpenRemoteDialog::fill);
    if (!initial.isEmpty()) {
        m_host->setCurrentText(initial.section(QLatin1Char(':'), 0, 0));
        fill(m_host->currentText());
        m_path->setCurrentText(initial.section(QLatin1Char(':'), 1));
    } else {
        fill(m_host->currentText());
    }
    auto *pathRow = new QHBoxLayout;
    pathRow->addWidget(m_path, 1);
    pathRow->addWidget(m_browse);
    form->addRow(tr("&Host:"), m_host);
    form->addRow(tr("&Checkpoint there:"), pathRow);
    form->addRow(tr("&Server:"), m_server);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Open | QDialogButtonBox::Cancel);
    form->addRow(buttons);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
}

void OpenRemoteDialog::fill(const QString &host)
{
    m_path->clear();
    for (const QString &where : recentRemoteLocations())
        if (where.section(QLatin1Char(':'), 0, 0) == host)
            m_path->addItem(where.section(QLatin1Char(':'), 1));
    m_server->setText(remoteServerFor(host));
}

QString OpenRemoteDialog::host() const
{
    return m_host->currentText().trimmed();
}

QString OpenRemoteDialog::path() const
{
    return m_path->currentText().trimmed();
}

QString OpenRemoteDialog::server() const
{
    return m_server->text().trimmed();
}

std::shared_ptr<model::RemoteBackend> OpenRemoteDialog::connection() const
{
    if (!m_connection || m_connectedHost != host() || m_connectedServer != server() ||
        !m_connection->connected())
        return nullptr;
    return m_connection;
}

void OpenRemoteDialog::browse()
{
    if (host().isEmpty())
        return;
    auto backend = connection();
    if (!backend) {
        QString error;
        const RemoteTarget target = targetFor(host(), server(), &error);
        backend = error.isEmpty() ? connectRemote(this, target, &error) : nullptr;
        if (!backend) {
            QMessageBox::warning(this, tr("Open Remote"), error);
            return;
        }
        m_connection = backend;
        m_connectedHost = host();
        m_connectedServer = server();
    }
    // From the path typed, or its directory when it names a file; else the remote home.
    const QString chosen = browseRemote(this, backend, path());
    if (!chosen.isEmpty())
        m_path->setCurrentText(chosen);
}

void openRemoteDialog(QWidget *parent, const QString &initial)
{
    OpenRemoteDialog dialog(parent, initial);
    if (dialog.exec() != QDialog::Accepted || dialog.host().isEmpty() || dialog.path().isEmpty())
        return;
    if (auto connected = dialog.connection()) // Browse… connected: open in that connection
        openRemoteWindow(connected, dialog.host(), dialog.path(), dialog.server());
    else
        openRemoteWindow(parent, dialog.host(), dialog.path(), dialog.server());
}

} // namespace shardscope::gui
