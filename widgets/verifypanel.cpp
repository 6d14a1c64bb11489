// SPDX-License-Identifier: MIT
#include "verifypanel.h"
#include "plaintooltips.h"

#include "columnfit.h"
#include "flowlayout.h"
#include "model/formatting.h"
#include "model/verifytablemodel.h"
#include "statusstyle.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QStyle>
#include <QStyledItemDelegate>
#include <QTreeView>
#include <QVBoxLayout>

#include <algorithm>

namespace shardscope::widgets {

using model::LoadMark;
using model::VerifyTableModel;

namespace {

class OutcomeDelegate : public QStyledItemDelegate
{
public:
    using QStyledItemDelegate::QStyledItemDelegate;

protected:
    void initStyleOption(QStyleOptionViewItem *option, const QModelIndex &index) const override
    {
        QStyledItemDelegate::initStyleOption(option, index);
        const auto mark = LoadMark(index.data(VerifyTableModel::LoadMarkRole).toInt());
        if (index.column() == VerifyTableModel::NoteColumn && !option->text.isEmpty()) {
            // A problem's note in its colour; a loaded parameter's remark muted, with an
            // information sign: never read as one of the problems listed above it.
            if (index.data(VerifyTableModel::NoteIsProblemRole).toBool()) {
                option->palette.setColor(QPalette::Text,
                                         attentionColor(attentionFor(mark), option->palette));
            } else {
                option->palette.setColor(QPalette::Text,
                                         option->palette.color(QPalette::PlaceholderText));
                option->features |= QStyleOptionViewItem::HasDecoration;
                option->icon =
                    option->widget->style()->standardIcon(QStyle::SP_MessageBoxInformation);
            }
            return;
        }
        if (index.column() != VerifyTableModel::OutcomeColumn)
            return;
        if (mark != LoadMark::None)
            applyAttention(option, attentionFor(mark));
    }
};

// Problems only: the rows whose mark asks for attention.
class OutcomeFilter : public QSortFilterProxyModel
{
public:
    using QSortFilterProxyModel::QSortFilterProxyModel;
    void setProblemsOnly(bool on)
    {
        m_problemsOnly = on;
        invalidateFilter();
    }

protected:
    bool filterAcceptsRow(int row, const QModelIndex &parent) const override
    {
        if (!m_problemsOnly)
            return true;
        const QModelIndex i = sourceModel()->index(row, 0, parent);
        return i.data(VerifyTableModel::LoadMarkRole).toInt() >= int(LoadMark::Unconsumed);
    }

private:
    bool m_problemsOnly = false;
};

QSpinBox *sizeBox(QWidget *parent, int min, const QString &tip)
{
    auto *box = new QSpinBox(parent);
    box->setRange(min, 1 << 16);
    box->setValue(min);
    box->setSpecialValueText(QObject::tr("layout"));
    box->setToolTip(tip);
    return box;
}

} // namespace

VerifyPanel::VerifyPanel(QWidget *parent)
    : QWidget(parent)
    , m_model(new VerifyTableModel(this))
    , m_proxy(new OutcomeFilter(this))
    , m_hash(new QCheckBox(tr("SHA-256"), this))
    , m_run(new QPushButton(tr("&Verify Load"), this))
    , m_cancel(new QPushButton(tr("Cancel"), this))
    , m_progress(new QProgressBar(this))
    , m_stage(new QLabel(this))
    , m_summary(new QLabel(this))
    , m_show(new QComboBox(this))
    , m_view(new QTreeView(this))
    , m_launchRow(new QWidget(this))
    , m_launcher(new QComboBox(m_launchRow))
    , m_collectives(new QComboBox(m_launchRow))
    , m_nodes(new QSpinBox(m_launchRow))
    , m_ranks(new QSpinBox(m_launchRow))
    , m_partition(new QLineEdit(m_launchRow))
    , m_time(new QLineEdit(m_launchRow))
    , m_account(new QLineEdit(m_launchRow))
{
    m_tp = sizeBox(this, 0, tr("Tensor-parallel size (0: the layout's)"));
    m_pp = sizeBox(this, 0, tr("Pipeline-parallel size"));
    m_ep = sizeBox(this, 0, tr("Expert-parallel size"));
    m_etp = sizeBox(this, 0, tr("Expert tensor-parallel size"));
    m_dp = sizeBox(this, 0, tr("Data-parallel (FSDP shard) size"));
    m_first = sizeBox(this, -1, tr("Decoder layers on the first pipeline stage"));
    m_last = sizeBox(this, -1, tr("Decoder layers on the last pipeline stage"));
    m_memory = new QSpinBox(this);
    m_memory->setRange(0, 1 << 24);
    m_memory->setSuffix(tr(" MiB"));
    m_memory->setSpecialValueText(tr("¼ of memory"));
    m_memory->setToolTip(tr("What the verification may hold at once, all threads together"));
    const std::pair<QSpinBox *, const char *> names[] = {{m_tp, "tp"},
                                                         {m_pp, "pp"},
                                                         {m_ep, "ep"},
                                                         {m_etp, "etp"},
                                                         {m_dp, "dp"},
                                                         {m_first, "firstStageLayers"},
                                                         {m_last, "lastStageLayers"}};
    for (const auto &[box, name] : names)
        box->setObjectName(QString::fromLatin1(name));
    m_memory->setObjectName(QStringLiteral("memory"));
    m_threads = new QSpinBox(this);
    m_threads->setObjectName(QStringLiteral("threads"));
    m_threads->setRange(0, 1024);
    m_threads->setSpecialValueText(tr("one per core"));
    m_hash->setToolTip(tr("Also hash every gathered parameter"));
    m_hash->setObjectName(QStringLiteral("hash"));
    m_run->setObjectName(QStringLiteral("run"));
    m_summary->setObjectName(QStringLiteral("summary"));

    auto *sizes = new QHBoxLayout;
    const std::pair<const char *, QSpinBox *> boxes[] = {
        {"TP", m_tp}, {"PP", m_pp}, {"EP", m_ep}, {"ETP", m_etp}, {"DP", m_dp}};
    for (const auto &[label, box] : boxes) {
        sizes->addWidget(new QLabel(QString::fromLatin1(label), this));
        sizes->addWidget(box);
    }
    sizes->addStretch(1);
    auto *stages = new QHBoxLayout;
    stages->addWidget(new QLabel(tr("First stage layers"), this));
    stages->addWidget(m_first);
    stages->addWidget(new QLabel(tr("Last stage layers"), this));
    stages->addWidget(m_last);
    stages->addWidget(new QLabel(tr("Memory"), this));
    stages->addWidget(m_memory);
    stages->addWidget(new QLabel(tr("Threads"), this));
    stages->addWidget(m_threads);
    stages->addWidget(m_hash);
    stages->addStretch(1);

    m_run->setToolTip(tr("Perform the planned load of every rank and check it bit for bit "
                         "(Tools ▸ Verify Load, Ctrl+R)"));
    connect(m_run, &QPushButton::clicked, this, &VerifyPanel::run);
    connect(m_cancel, &QPushButton::clicked, this, &VerifyPanel::cancelRequested);
    m_progress->setMaximumWidth(220);
    m_progress->setMaximumHeight(16);
    for (QWidget *w : {static_cast<QWidget *>(m_cancel), static_cast<QWidget *>(m_progress),
                       static_cast<QWidget *>(m_stage)})
        w->hide();
    m_show->addItem(tr("All parameters"));
    m_show->addItem(tr("Problems"));
    connect(m_show, &QComboBox::currentIndexChanged, this,
            [this](int i) { static_cast<OutcomeFilter *>(m_proxy)->setProblemsOnly(i == 1); });
    auto *run = new QHBoxLayout;
    run->addWidget(m_run);
    run->addWidget(m_progress);
    run->addWidget(m_stage);
    run->addWidget(m_cancel);
    run->addWidget(m_summary, 1);
    run->addWidget(m_show);

    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(VerifyTableModel::SortRole);
    m_view->setModel(m_proxy);
    installPlainToolTips(m_view);
    m_view->setRootIsDecorated(false);
    m_view->setUniformRowHeights(true);
    m_view->setAlternatingRowColors(true);
    m_view->setSortingEnabled(true);
    m_view->sortByColumn(-1, Qt::AscendingOrder); // the model's order: worst first
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setItemDelegate(new OutcomeDelegate(m_view));
    m_view->setTextElideMode(Qt::ElideRight);
    // The note says why an outcome is what it is: beside it, not past the statistics.
    m_view->header()->moveSection(m_view->header()->visualIndex(VerifyTableModel::NoteColumn),
                                  m_view->header()->visualIndex(VerifyTableModel::OutcomeColumn) +
                                      1);
    fitColumnsToContents(m_view, 0.35);
    connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex &current) {
                if (current.isValid())
                    Q_EMIT parameterSelected(
                        current.data(VerifyTableModel::NameRole).toString(),
                        current.data(VerifyTableModel::SourceKeyRole).toString());
            });

    // Where a remote checkpoint's verification runs: the CLI's `--ssh … verify --launch`
    // options, the same RemoteLaunch value. Wraps on a laptop (flowlayout.h).
    using L = RemoteLaunch::Launcher;
    m_launcher->setObjectName(QStringLiteral("launcher"));
    m_launcher->addItem(QString(), int(L::None)); // named by setRemoteHost()
    m_launcher->addItem(tr("as a job: srun, else torchrun"), int(L::Auto));
    m_launcher->addItem(tr("as a job: srun"), int(L::Srun));
    m_launcher->addItem(tr("as a job: torchrun (one node)"), int(L::Torchrun));
    m_launcher->setToolTip(tr("In the server's process, on the threads it may use there, or as a "
                              "job of several processes the server launches (srun where Slurm "
                              "is, torchrun on its own node); rank 0's progress and the result "
                              "come back, and Cancel stops the whole job"));
    m_nodes->setObjectName(QStringLiteral("nodes"));
    m_nodes->setRange(1, 100000);
    m_nodes->setToolTip(tr("Nodes the job asks Slurm for (srun --nodes)"));
    m_ranks->setObjectName(QStringLiteral("ranks"));
    m_ranks->setRange(1, 1000000);
    m_ranks->setToolTip(tr("Processes in all, over every node (srun --ntasks; torchrun "
                           "--nproc-per-node on its one node)"));
    m_partition->setObjectName(QStringLiteral("partition"));
    m_partition->setPlaceholderText(tr("default"));
    m_partition->setToolTip(tr("Slurm's partition (srun --partition)"));
    m_time->setObjectName(QStringLiteral("timeLimit"));
    m_time->setPlaceholderText(tr("default"));
    m_time->setToolTip(tr("Slurm's time limit, e.g. 0:30:00 (srun --time)"));
    m_account->setObjectName(QStringLiteral("account"));
    m_account->setPlaceholderText(tr("default"));
    m_account->setToolTip(tr("Slurm's account (srun --account)"));
    m_collectives->setObjectName(QStringLiteral("collectives"));
    for (const char *b : {"auto", "gloo", "nccl"})
        m_collectives->addItem(QString::fromLatin1(b), QString::fromLatin1(b));
    m_collectives->setToolTip(
        tr("The ranks' collectives: gloo (CPU), nccl (GPU) or auto (nccl where CUDA is)"));
    for (QLineEdit *e : {m_partition, m_time, m_account})
        e->setMaximumWidth(fontMetrics().horizontalAdvance(QLatin1Char('x')) * 14);
    auto *launchFlow = new FlowLayout(m_launchRow);
    launchFlow->setContentsMargins(0, 0, 0, 0);
    const std::pair<QString, QWidget *> launchItems[] = {
        {tr("Run"), m_launcher},           {tr("Nodes"), m_nodes}, {tr("Ranks"), m_ranks},
        {tr("Partition"), m_partition},    {tr("Time"), m_time},   {tr("Account"), m_account},
        {tr("Collectives"), m_collectives}};
    for (const auto &[label, widget] : launchItems) {
        // Label and field stay together when the row wraps.
        auto *pair = new QWidget(m_launchRow);
        auto *h = new QHBoxLayout(pair);
        h->setContentsMargins(0, 0, 0, 0);
        auto *l = new QLabel(label, pair);
        l->setBuddy(widget);
        widget->setParent(pair);
        h->addWidget(l);
        h->addWidget(widget);
        launchFlow->addWidget(pair);
    }
    connect(m_launcher, &QComboBox::currentIndexChanged, this, [this] {
        updateLaunchControls();
        Q_EMIT launchChanged(launch());
    });
    connect(m_collectives, &QComboBox::currentIndexChanged, this,
            [this] { Q_EMIT launchChanged(launch()); });
    for (QSpinBox *b : {m_nodes, m_ranks})
        connect(b, &QSpinBox::valueChanged, this, [this] { Q_EMIT launchChanged(launch()); });
    for (QLineEdit *e : {m_partition, m_time, m_account})
        connect(e, &QLineEdit::editingFinished, this, [this] { Q_EMIT launchChanged(launch()); });
    m_launchRow->hide(); // a local checkpoint verifies in this process
    updateLaunchControls();

    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addLayout(sizes);
    layout->addLayout(stages);
    layout->addWidget(m_launchRow);
    layout->addLayout(run);
    layout->addWidget(m_view, 1);
    setReady(false, tr("Open a checkpoint and a layout or model config first."));
}

shardscope::VerifyRequest VerifyPanel::request() const
{
    VerifyRequest r;
    r.tp = m_tp->value();
    r.pp = m_pp->value();
    r.ep = m_ep->value();
    r.etp = m_etp->value();
    r.dp = m_dp->value();
    r.firstStageLayers = m_first->value();
    r.lastStageLayers = m_last->value();
    r.maxMemory = uint64_t(m_memory->value()) << 20;
    r.threads = m_threads->value();
    r.hash = m_hash->isChecked();
    return r;
}

void VerifyPanel::setRemoteHost(const QString &host, bool srun, bool torchrun)
{
    m_remote = !host.isEmpty();
    m_launchRow->setVisible(m_remote);
    m_hasSrun = srun;
    m_hasTorchrun = torchrun;
    m_launcher->setItemText(0, tr("on %1's threads").arg(host));
    // A launcher the server did not find stays listed, off, with the reason.
    auto *items = qobject_cast<QStandardItemModel *>(m_launcher->model());
    const QString missing = tr("%1 is not on the PATH of the server on %2 (a non-interactive "
                               "ssh shell may lack the module that adds it)");
    const std::tuple<int, bool, QString> offered[] = {
        {1, srun || torchrun, missing.arg(QStringLiteral("srun nor torchrun"), host)},
        {2, srun, missing.arg(QStringLiteral("srun"), host)},
        {3, torchrun, missing.arg(QStringLiteral("torchrun"), host)}};
    for (const auto &[row, there, why] : offered)
        if (QStandardItem *item = items ? items->item(row) : nullptr) {
            item->setEnabled(there);
            item->setToolTip(there ? QString() : why);
        }
    updateLaunchControls();
}

shardscope::RemoteLaunch VerifyPanel::launch() const
{
    RemoteLaunch l;
    if (!m_remote)
        return l; // a local checkpoint
    l.launcher = RemoteLaunch::Launcher(m_launcher->currentData().toInt());
    l.nodes = m_nodes->value();
    l.ranks = m_ranks->value();
    l.partition = m_partition->text().trimmed().toStdString();
    l.timeLimit = m_time->text().trimmed().toStdString();
    l.account = m_account->text().trimmed().toStdString();
    l.backend = m_collectives->currentData().toString().toStdString();
    return l;
}

void VerifyPanel::setLaunch(const shardscope::RemoteLaunch &launch)
{
    const QSignalBlocker blocks[] = {QSignalBlocker(m_launcher), QSignalBlocker(m_nodes),
                                     QSignalBlocker(m_ranks), QSignalBlocker(m_collectives)};
    m_launcher->setCurrentIndex(std::max(0, m_launcher->findData(int(launch.launcher))));
    m_nodes->setValue(launch.nodes);
    m_ranks->setValue(launch.ranks);
    m_partition->setText(QString::fromStdString(launch.partition));
    m_time->setText(QString::fromStdString(launch.timeLimit));
    m_account->setText(QString::fromStdString(launch.account));
    m_collectives->setCurrentIndex(
        std::max(0, m_collectives->findData(QString::fromStdString(launch.backend))));
    updateLaunchControls();
}

void VerifyPanel::updateLaunchControls()
{
    using L = RemoteLaunch::Launcher;
    const auto which = L(m_launcher->currentData().toInt());
    const bool job = which != L::None;
    // Slurm's own options mean nothing to torchrun, which runs on the server's node.
    const bool slurm = which == L::Srun || (which == L::Auto && m_hasSrun);
    m_ranks->setEnabled(job);
    m_collectives->setEnabled(job);
    for (QWidget *w : {static_cast<QWidget *>(m_nodes), static_cast<QWidget *>(m_partition),
                       static_cast<QWidget *>(m_time), static_cast<QWidget *>(m_account)})
        w->setEnabled(slurm);
}

void VerifyPanel::run()
{
    Q_EMIT runRequested(request());
}

void VerifyPanel::setReady(bool ready, const QString &why)
{
    m_run->setEnabled(ready && !m_running);
    if (!ready && !m_model->report())
        m_summary->setText(why);
    else if (ready && !m_model->report())
        m_summary->setText(tr("Not verified yet."));
}

void VerifyPanel::setReport(const model::VerifySnapshot &report, const model::DiffSnapshot &diff)
{
    m_diff = diff;
    m_model->setReport(report, diff);
    updateSummary();
}

void VerifyPanel::updateSummary()
{
    const model::VerifySnapshot &r = m_model->report();
    if (!r) {
        m_summary->setText(tr("Not verified yet."));
        return;
    }
    const VerifyResult &v = r->result;
    QString text = tr("%1 checked · %2 identical")
                       .arg(model::formatCount(v.checked), model::formatCount(v.identical));
    const std::pair<size_t, QString> bad[] = {
        {v.mismatched, tr("mismatched")},          {v.roundTripFailures, tr("round trip failed")},
        {v.keptInitial, tr("kept at init")},       {v.unreadable, tr("unreadable")},
        {v.wrongSource, tr("from the wrong key")},
    };
    for (const auto &[n, what] : bad)
        if (n)
            text += QStringLiteral(" · <b>%1 %2</b>").arg(model::formatCount(n), what);
    text += tr(" · %1 · %2 in %3 s")
                .arg(model::countOf(uint64_t(v.world), "rank", "ranks"))
                .arg(model::formatBytes(v.bytesRead))
                .arg(v.seconds, 0, 'f', 2);
    m_summary->setText(text);
    m_summary->setToolTip(
        tr("Statistics computed on %1").arg(QString::fromStdString(r->healthDevice())));
}

bool VerifyPanel::selectStoredKey(const QString &key)
{
    if (!m_diff || !m_model->report())
        return false;
    const std::string k = key.toStdString();
    // The parameter the load fills from the key, or the one whose data it holds unread (kept
    // at its initial values).
    for (const DiffEntry &e : m_diff->entries) {
        if (e.section != Section::Model)
            continue;
        const bool reads = std::any_of(e.sources.begin(), e.sources.end(),
                                       [&](const DiffSource &s) { return s.key == k; });
        if (!reads && std::find(e.unreadKeys.begin(), e.unreadKeys.end(), k) == e.unreadKeys.end())
            continue;
        const int row = m_model->rowOf(QString::fromStdString(e.name));
        const QModelIndex at = m_proxy->mapFromSource(m_model->index(row, 0));
        if (row < 0 || !at.isValid())
            continue;
        const QSignalBlocker block(m_view->selectionModel());
        m_view->setCurrentIndex(at);
        m_view->scrollTo(at);
        m_view->viewport()->update();
        return true;
    }
    return false;
}

void VerifyPanel::jobStarted()
{
    m_running = true;
    m_run->setEnabled(false);
    m_progress->setRange(0, 0);
    m_stage->clear();
    for (QWidget *w : {static_cast<QWidget *>(m_cancel), static_cast<QWidget *>(m_progress),
                       static_cast<QWidget *>(m_stage)})
        w->show();
}

void VerifyPanel::jobProgress(const QString &stage, int permille, double etaSeconds)
{
    m_stage->setText(showJobProgress(m_progress, stage, permille, etaSeconds));
}

void VerifyPanel::jobEnded(bool ok, const QString &message)
{
    m_running = false;
    m_run->setEnabled(true);
    for (QWidget *w : {static_cast<QWidget *>(m_cancel), static_cast<QWidget *>(m_progress),
                       static_cast<QWidget *>(m_stage)})
        w->hide();
    if (!ok)
        m_summary->setText(tr("Verification: %1").arg(message.toHtmlEscaped()));
}

} // namespace shardscope::widgets
