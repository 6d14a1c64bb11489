// SPDX-License-Identifier: MIT
#include "remoteconnect.h"

#include "mainwindow.h"

#include <QApplication>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QEventLoop>
#include <QFile>
#include <QFormLayout>
#include <QInputDialog>
#include <QLineEdit>
#include <QMessageBox>
#include <QPointer>
#include <QProgressDialog>
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

void openRemoteWindow(QWidget *parent, const QString &host, const QString &path,
                      const QString &server)
{
    auto target = RemoteTarget::parse(host.toStdString());
    if (!target) {
        QMessageBox::warning(parent, QObject::tr("Open Remote"),
                             QString::fromStdString(target.error().message));
        return;
    }
    target->server = server.isEmpty() ? std::string("shardscope-cli") : server.toStdString();
    QString error;
    auto backend = connectRemote(parent, *target, &error);
    if (!backend) {
        QMessageBox::warning(parent, QObject::tr("Open Remote"), error);
        return;
    }
    addRecentRemoteLocation(host, path, server);
    auto *window = new MainWindow(backend);
    window->setAttribute(Qt::WA_DeleteOnClose);
    window->show();
    window->openPath(path);
}

void openRemoteDialog(QWidget *parent, const QString &initial)
{
    QDialog dialog(parent);
    dialog.setWindowTitle(QObject::tr("Open Remote"));
    auto *form = new QFormLayout(&dialog);
    auto *host = new QComboBox(&dialog);
    host->setEditable(true);
    QStringList hosts;
    for (const QString &where : recentRemoteLocations())
        if (const QString h = where.section(QLatin1Char(':'), 0, 0); !hosts.contains(h))
            hosts << h;
    for (const QString &h : sshConfigHosts())
        if (!hosts.contains(h))
            hosts << h;
    host->addItems(hosts);
    host->setToolTip(QObject::tr("[user@]host[:port], or a Host of ~/.ssh/config; ssh connects "
                                 "as it would from a terminal"));
    auto *path = new QComboBox(&dialog);
    path->setEditable(true);
    path->setMinimumContentsLength(40);
    auto *server = new QLineEdit(&dialog);
    auto fill = [&](const QString &h) {
        path->clear();
        for (const QString &where : recentRemoteLocations())
            if (where.section(QLatin1Char(':'), 0, 0) == h)
                path->addItem(where.section(QLatin1Char(':'), 1));
        server->setText(remoteServerFor(h));
    };
    QObject::connect(host, &QComboBox::currentTextChanged, &dialog, fill);
    if (!initial.isEmpty()) {
        host->setCurrentText(initial.section(QLatin1Char(':'), 0, 0));
        fill(host->currentText());
        path->setCurrentText(initial.section(QLatin1Char(':'), 1));
    } else {
        fill(host->currentText());
    }
    form->addRow(QObject::tr("&Host:"), host);
    form->addRow(QObject::tr("&Checkpoint there:"), path);
    form->addRow(QObject::tr("&Server:"), server);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Open | QDialogButtonBox::Cancel);
    form->addRow(buttons);
    QObject::connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    QObject::connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    if (dialog.exec() != QDialog::Accepted || host->currentText().trimmed().isEmpty() ||
        path->currentText().trimmed().isEmpty())
        return;
    openRemoteWindow(parent, host->currentText().trimmed(), path->currentText().trimmed(),
                     server->text().trimmed());
}

} // namespace shardscope::gui
