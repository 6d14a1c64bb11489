// SPDX-License-Identifier: MIT
#include "remotebrowser.h"

#include "model/formatting.h"
#include "model/remotebackend.h"

#include <QApplication>
#include <QDialogButtonBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPointer>
#include <QPushButton>
#include <QStyle>
#include <QTreeWidget>
#include <QVBoxLayout>

#include <thread>

namespace shardscope::gui {

namespace {

enum Column { NameColumn, SizeColumn, NoteColumn };
enum Role { PathRole = Qt::UserRole, DirectoryRole };

QString parentOf(const QString &dir)
{
    if (dir.isEmpty() || dir == QStringLiteral("/"))
        return QStringLiteral("/");
    const qsizetype slash = dir.lastIndexOf(QLatin1Char('/'));
    return slash <= 0 ? QStringLiteral("/") : dir.left(slash);
}

QString joined(const QString &dir, const QString &name)
{
    return dir.endsWith(QLatin1Char('/')) ? dir + name : dir + QLatin1Char('/') + name;
}

} // namespace

RemoteBrowser::RemoteBrowser(std::shared_ptr<RemoteSession> session, const QString &host,
                             const QString &start, QWidget *parent)
    : QDialog(parent)
    , m_session(std::move(session))
    , m_path(new QLineEdit(this))
    , m_up(new QPushButton(tr("&Up"), this))
    , m_open(new QPushButton(tr("&Open"), this))
    , m_list(new QTreeWidget(this))
    , m_status(new QLabel(this))
{
    setWindowTitle(tr("Browse %1").arg(host));
    m_path->setObjectName(QStringLiteral("path"));
    m_path->setToolTip(tr("A directory on %1: Enter lists it").arg(host));
    m_up->setObjectName(QStringLiteral("up"));
    m_up->setIcon(style()->standardIcon(QStyle::SP_FileDialogToParent));
    m_up->setToolTip(tr("The parent directory"));
    m_list->setObjectName(QStringLiteral("entries"));
    m_list->setHeaderLabels({tr("Name"), tr("Size"), QString()});
    m_list->setRootIsDecorated(false);
    m_list->setUniformRowHeights(true);
    m_list->setAlternatingRowColors(true);
    m_list->header()->setSectionResizeMode(NameColumn, QHeaderView::Stretch);
    m_list->header()->setStretchLastSection(false);
    m_list->setToolTip(tr("Double-click a directory to enter it; bold: looks like a checkpoint"));
    m_status->setObjectName(QStringLiteral("status"));
    m_status->setWordWrap(true);
    m_open->setObjectName(QStringLiteral("open"));
    m_open->setDefault(true);

    auto *top = new QHBoxLayout;
    top->addWidget(m_up);
    top->addWidget(m_path, 1);
    auto *buttons = new QDialogButtonBox(this);
    buttons->addButton(m_open, QDialogButtonBox::AcceptRole);
    buttons->addButton(QDialogButtonBox::Cancel);
    auto *layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addWidget(m_list, 1);
    layout->addWidget(m_status);
    layout->addWidget(buttons);
    // Fits a laptop's screen with room for the window behind it.
    resize(QSize(640, 420)
               .boundedTo(parent ? parent->size() : QSize(640, 420))
               .expandedTo(QSize(420, 300)));

    connect(m_up, &QPushButton::clicked, this, &RemoteBrowser::up);
    connect(m_path, &QLineEdit::returnPressed, this, [this] { showDirectory(m_path->text()); });
    connect(m_list, &QTreeWidget::itemActivated, this, &RemoteBrowser::activated);
    connect(buttons, &QDialogButtonBox::accepted, this, &RemoteBrowser::choose);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    showDirectory(start);
}

RemoteBrowser::~RemoteBrowser()
{
    m_cancel.cancel();
}

void RemoteBrowser::showDirectory(const QString &path)
{
    m_cancel.cancel();
    m_cancel = CancelToken();
    const int generation = ++m_generation;
    m_requested = path;
    m_pending = true;
    m_status->setText(tr("Listing %1…").arg(path.isEmpty() ? tr("the home directory") : path));
    m_up->setEnabled(false);
    // The listing waits on the network and the cluster's file system: off the GUI thread.
    JobControl control;
    control.cancel = m_cancel;
    QPointer<RemoteBrowser> self(this);
    std::thread([session = m_session, where = path.toStdString(), control, self, generation] {
        auto result =
            std::make_shared<Result<RemoteListing>>(session->listDirectory(where, control));
        QMetaObject::invokeMethod(qApp, [self, generation, result] {
            if (self)
                self->received(generation, *result);
        });
    }).detach();
}

void RemoteBrowser::up()
{
    showDirectory(parentOf(m_directory));
}

void RemoteBrowser::received(int generation, const Result<RemoteListing> &listing)
{
    if (generation != m_generation)
        return;
    m_pending = false;
    m_up->setEnabled(!m_directory.isEmpty() && m_directory != QStringLiteral("/"));
    if (!listing && m_directory.isEmpty() && !m_triedParent && !m_requested.isEmpty()) {
        m_triedParent = true; // a file's path given: its directory
        showDirectory(parentOf(m_requested));
        return;
    }
    if (!listing) {
        m_status->setText(QString::fromStdString(listing.error().toString()).toHtmlEscaped());
        Q_EMIT listed();
        return;
    }
    m_directory = QString::fromStdString(listing->path);
    m_path->setText(m_directory);
    m_up->setEnabled(m_directory != QStringLiteral("/"));
    m_list->clear();
    const QIcon folder = style()->standardIcon(QStyle::SP_DirIcon);
    const QIcon file = style()->standardIcon(QStyle::SP_FileIcon);
    QList<QTreeWidgetItem *> rows;
    int checkpoints = 0;
    for (const RemoteDirEntry &e : listing->entries) {
        const bool dir = e.kind == RemoteDirEntry::Kind::Directory;
        const QString name = QString::fromStdString(e.name);
        auto *item = new QTreeWidgetItem;
        item->setText(NameColumn, model::displayText(e.name));
        item->setIcon(NameColumn, dir ? folder : file);
        item->setData(NameColumn, PathRole, joined(m_directory, name));
        item->setData(NameColumn, DirectoryRole, dir);
        if (e.kind == RemoteDirEntry::Kind::File) {
            item->setText(SizeColumn, model::formatBytes(e.size));
            item->setTextAlignment(SizeColumn, Qt::AlignRight | Qt::AlignVCenter);
        }
        QStringList note;
        if (e.checkpoint) {
            ++checkpoints;
            note << tr("checkpoint");
            QFont bold = item->font(NameColumn);
            bold.setBold(true);
            item->setFont(NameColumn, bold);
        }
        if (e.link)
            note << tr("link");
        if (e.kind == RemoteDirEntry::Kind::Other)
            note << (e.link ? tr("broken") : tr("special file"));
        item->setText(NoteColumn, note.join(QStringLiteral(", ")));
        rows << item;
    }
    m_list->addTopLevelItems(rows);
    m_list->resizeColumnToContents(SizeColumn);
    m_list->resizeColumnToContents(NoteColumn);
    const QString entries = model::countOf(uint64_t(rows.size()), "entry", "entries");
    QString status =
        listing->checkpoint ? tr("This directory looks like a checkpoint: Open opens it.")
        : checkpoints == 1  ? tr("%1; 1 looks like a checkpoint (bold).").arg(entries)
        : checkpoints ? tr("%1; %2 look like a checkpoint (bold).").arg(entries).arg(checkpoints)
                      : entries + QLatin1Char('.');
    if (listing->leftOut)
        status += QLatin1Char(' ') + tr("%1 more left out (past the listing's bound, or names "
                                        "that are not UTF-8).")
                                         .arg(listing->leftOut);
    m_status->setText(status);
    Q_EMIT listed();
}

QString RemoteBrowser::pathOf(const QTreeWidgetItem *item) const
{
    return item ? item->data(NameColumn, PathRole).toString() : QString();
}

void RemoteBrowser::activated(QTreeWidgetItem *item)
{
    if (!item)
        return;
    if (item->data(NameColumn, DirectoryRole).toBool()) {
        showDirectory(pathOf(item));
        return;
    }
    m_chosen = pathOf(item);
    accept();
}

void RemoteBrowser::choose()
{
    // Enter in the path lists it (the dialog's default button hears that Enter too).
    if (m_path->hasFocus() && m_path->text() != m_directory) {
        showDirectory(m_path->text());
        return;
    }
    if (m_directory.isEmpty() || m_pending)
        return;
    const QList<QTreeWidgetItem *> selected = m_list->selectedItems();
    m_chosen = selected.isEmpty() ? m_directory : pathOf(selected.first());
    accept();
}

QString browseRemote(QWidget *parent, const std::shared_ptr<model::RemoteBackend> &remote,
                     const QString &start)
{
    if (!remote)
        return {};
    // Where the checkpoint shown lives, else the remote home.
    RemoteBrowser browser(remote->session(), remote->location(), start, parent);
    return browser.exec() == QDialog::Accepted ? browser.chosenPath() : QString();
}

} // namespace shardscope::gui
