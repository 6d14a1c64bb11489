// SPDX-License-Identifier: MIT
#include "diffpanel.h"
#include "plaintooltips.h"

#include "columnfit.h"
#include "flowlayout.h"
#include "model/diffchoices.h"
#include "model/difffilterproxy.h"
#include "model/difflistmodel.h"
#include "model/formatting.h"
#include "statusstyle.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QSignalBlocker>
#include <QSplitter>
#include <QStyle>
#include <QStyledItemDelegate>
#include <QTextBrowser>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>

#include <algorithm>

namespace shardscope::widgets {

using model::DiffListModel;

namespace {

// Status in colour and with an icon (never colour alone): kept at init loudest, problems red
// with a stop sign, what a load changes amber with a warning sign, what loads as is a check.
class StatusDelegate : public QStyledItemDelegate
{
public:
    using QStyledItemDelegate::QStyledItemDelegate;

protected:
    void initStyleOption(QStyleOptionViewItem *option, const QModelIndex &index) const override
    {
        QStyledItemDelegate::initStyleOption(option, index);
        // Keys differ at their end (the layer, then the parameter's name): cut at the start.
        if (index.column() == DiffListModel::NameColumn ||
            index.column() == DiffListModel::StoredColumn)
            option->textElideMode = Qt::ElideLeft;
        if (index.column() != DiffListModel::StatusColumn &&
            index.column() != DiffListModel::LoadColumn)
            return;
        const bool kept = index.data(DiffListModel::KeptAtInitRole).toBool();
        const bool problem = index.data(DiffListModel::ProblemRole).toBool();
        const QString status = index.data(DiffListModel::DiffStatusRole).toString();
        // A cast is a problem the report counts, loaded with a change: amber, not red.
        if (kept)
            applyAttention(option, Attention::Worst);
        else if (status == QStringLiteral("unconsumed") || status == QStringLiteral("cast"))
            applyAttention(option, Attention::Warning);
        else if (problem)
            applyAttention(option, Attention::Bad);
        else
            applyAttention(option, Attention::Fine);
    }
};

// What F8 stops at, and what the details pane explains first.
bool isProblemRow(const QModelIndex &i)
{
    return i.data(DiffListModel::ProblemRole).toBool() ||
           i.data(DiffListModel::KeptAtInitRole).toBool();
}

} // namespace

DiffPanel::DiffPanel(QWidget *parent)
    : QWidget(parent)
    , m_model(new DiffListModel(this))
    , m_proxy(new model::DiffFilterProxy(this))
    , m_banner(new QLabel(this))
    , m_status(new QComboBox(this))
    , m_rules(new QToolButton(this))
    , m_strictness(new QComboBox(this))
    , m_partial(new QCheckBox(tr("Partial load"), this))
    , m_view(new QTreeView(this))
    , m_details(new QTextBrowser(this))
{
    m_proxy->setSourceModel(m_model);
    // Names for tests and accessibility tools.
    m_banner->setObjectName(QStringLiteral("banner"));
    m_status->setObjectName(QStringLiteral("statusFilter"));
    m_rules->setObjectName(QStringLiteral("rules"));
    m_strictness->setObjectName(QStringLiteral("strictness"));
    m_partial->setObjectName(QStringLiteral("partialLoad"));
    m_view->setObjectName(QStringLiteral("entries"));
    m_banner->setWordWrap(true);
    m_banner->setTextInteractionFlags(Qt::TextSelectableByMouse);
    // Room for what the banner says once there is a diff (the load, its message, what is kept
    // at init), so that the controls below do not move when it comes.
    m_banner->setMinimumHeight(4 * fontMetrics().lineSpacing() + 4);
    m_banner->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    m_banner->setText(tr("No layout: File ▸ Check Against Layout… or Model Config…"));

    m_status->addItem(tr("All entries"), QString());
    m_status->addItem(tr("Problems"), QStringLiteral("problems"));
    for (const char *s : {"ok", "split", "merge", "rename", "cast", "shape_mismatch", "partial",
                          "unloadable", "unreadable", "wrong_source", "unconsumed"})
        m_status->addItem(QString::fromLatin1(s), QString::fromLatin1(s));
    m_status->setToolTip(tr("Show entries of one status"));
    connect(m_status, &QComboBox::currentIndexChanged, this,
            [this] { m_proxy->setStatusFilter(m_status->currentData().toString()); });

    // The rules, each switchable: what a missing handler does shows at once.
    m_rules->setText(tr("Rules"));
    m_rules->setPopupMode(QToolButton::InstantPopup);
    auto *rules = new QMenu(m_rules);
    for (const model::RuleChoice &r : model::diffRules()) {
        QAction *a = rules->addAction(r.name);
        a->setCheckable(true);
        a->setChecked(true);
        a->setToolTip(r.description);
        connect(a, &QAction::toggled, this, [this] { Q_EMIT optionsChanged(options()); });
    }
    rules->setToolTipsVisible(true);
    m_rules->setMenu(rules);

    m_strictness->addItems(model::strictnessNames());
    m_strictness->setToolTip(tr("Megatron's --dist-ckpt-strictness"));
    connect(m_strictness, &QComboBox::currentIndexChanged, this,
            [this] { Q_EMIT optionsChanged(options()); });
    m_partial->setToolTip(tr("A non-strict load: --no-strict-fsdp-dtensor-load, or "
                             "load_state_dict(strict=False)"));
    connect(m_partial, &QCheckBox::toggled, this, [this] { Q_EMIT optionsChanged(options()); });

    m_view->setModel(m_proxy);
    installPlainToolTips(m_view);
    m_view->setRootIsDecorated(false);
    m_view->setUniformRowHeights(true);
    m_view->setAlternatingRowColors(true);
    m_view->setSelectionMode(QAbstractItemView::SingleSelection);
    m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_view->setItemDelegate(new StatusDelegate(m_view));
    m_view->setTextElideMode(Qt::ElideRight);
    // What the tab is for comes first: the reason beside the status, where the key was
    // stored after it (the details pane has all of it, wrapped).
    m_view->header()->moveSection(m_view->header()->visualIndex(DiffListModel::ReasonColumn),
                                  m_view->header()->visualIndex(DiffListModel::StoredColumn));
    fitColumnsToContents(m_view, 0.4);
    connect(m_view->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex &current) {
                showDetails(current);
                if (current.isValid()) {
                    const QModelIndex i = current.siblingAtColumn(DiffListModel::NameColumn);
                    Q_EMIT entrySelected(i.data().toString(),
                                         i.data(DiffListModel::StoredKeyRole).toString());
                }
            });
    m_details->setObjectName(QStringLiteral("entryDetails"));
    m_details->setPlaceholderText(tr("The selected entry: its full key, where it is stored, "
                                     "why, and the fix."));

    // One row where there is room, wrapped at a laptop's width: never the window's minimum.
    auto *controls = new FlowLayout(nullptr, 6, 2);
    controls->addWidget(m_status);
    controls->addWidget(m_rules);
    auto *strictness = new QWidget(this);
    auto *strictnessLayout = new QHBoxLayout(strictness);
    strictnessLayout->setContentsMargins(0, 0, 0, 0);
    strictnessLayout->addWidget(new QLabel(tr("Strictness"), strictness));
    strictnessLayout->addWidget(m_strictness);
    controls->addWidget(strictness);
    controls->addWidget(m_partial);
    for (QWidget *item : attentionLegendItems(this))
        controls->addWidget(item);

    auto *split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(m_view);
    split->addWidget(m_details);
    split->setStretchFactor(0, 5);
    split->setStretchFactor(1, 2);

    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_banner);
    layout->addLayout(controls);
    layout->addWidget(split, 1);
    // F8 / Shift+F8 are the window's (Tools ▸ Next Problem), so they work from any view.
}

void DiffPanel::setDiff(const model::DiffSnapshot &diff)
{
    m_model->setDiff(diff);
    updateBanner();
    m_details->clear();
    // The first problem is explained at once, before anything is selected (F8 still goes to
    // it first). The proxy keeps the model's order: the first problem row it shows.
    for (int r = m_model->nextProblemRow(0); r >= 0; r = m_model->nextProblemRow(r + 1)) {
        const QModelIndex i = m_proxy->mapFromSource(m_model->index(r, 0));
        if (i.isValid()) {
            showDetails(i, tr("The first problem (F8 for the next):"));
            break;
        }
    }
}

shardscope::DiffOptions DiffPanel::options() const
{
    DiffOptions o;
    for (const QAction *a : m_rules->menu()->actions())
        if (!a->isChecked())
            o.disabledRules.push_back(a->text().toStdString());
    o.strictness = Strictness(m_strictness->currentIndex());
    o.strictLoad = !m_partial->isChecked();
    return o;
}

void DiffPanel::setOptions(const DiffOptions &o)
{
    const QSignalBlocker blockStrictness(m_strictness), blockPartial(m_partial);
    for (QAction *a : m_rules->menu()->actions()) {
        const QSignalBlocker block(a);
        a->setChecked(std::find(o.disabledRules.begin(), o.disabledRules.end(),
                                a->text().toStdString()) == o.disabledRules.end());
    }
    m_strictness->setCurrentIndex(int(o.strictness));
    m_partial->setChecked(!o.strictLoad);
}

void DiffPanel::setAgainst(const QString &what)
{
    m_against = what;
    updateBanner();
}

void DiffPanel::setFilterText(const QString &text)
{
    m_proxy->setFilterText(text);
}

bool DiffPanel::gotoProblem(bool forward)
{
    const int rows = m_proxy->rowCount();
    const int from = m_view->currentIndex().isValid() ? m_view->currentIndex().row()
                     : forward                        ? -1
                                                      : rows;
    for (int r = from + (forward ? 1 : -1); r >= 0 && r < rows; r += forward ? 1 : -1) {
        const QModelIndex i = m_proxy->index(r, 0);
        if (isProblemRow(i)) {
            m_view->setCurrentIndex(i);
            m_view->scrollTo(i);
            return true;
        }
    }
    return false;
}

QString DiffPanel::currentFix() const
{
    return m_view->currentIndex().siblingAtColumn(0).data(DiffListModel::FixRole).toString();
}

void DiffPanel::updateBanner()
{
    const model::DiffSnapshot &d = m_model->diff();
    if (!d) {
        m_banner->setText(m_against.isEmpty()
                              ? tr("No layout: File ▸ Check Against Layout… or Model Config…")
                              : tr("Checking against %1…").arg(m_against.toHtmlEscaped()));
        return;
    }
    const LoadOutcome &o = d->outcome;
    QString html = tr("<b>Real load: %1</b> · %2 of %3 parameters filled")
                       .arg(model::loadActionName(o.action), model::formatCount(d->loadableModel),
                            model::formatCount(d->expectedModel));
    if (!o.message.empty())
        html += QStringLiteral("<br><code>%1</code>")
                    .arg(QString::fromStdString(o.message).toHtmlEscaped());
    if (!o.keptAtInit.empty())
        html += (o.keptAtInit.size() == 1
                     ? tr("<br><span style=\"color:%2; font-weight:bold\">%1 parameter silently "
                          "keeps its initial values</span>")
                     : tr("<br><span style=\"color:%2; font-weight:bold\">%1 parameters "
                          "silently keep their initial values</span>"))
                    .arg(model::formatCount(o.keptAtInit.size()),
                         attentionColor(Attention::Worst, palette()).name());
    for (const std::string &w : o.warnings)
        html += QStringLiteral("<br>⚠ %1").arg(QString::fromStdString(w).toHtmlEscaped());
    // What it was checked against and how, said every time: a newly opened checkpoint keeps
    // the layout and the rules, and nothing may be kept silently.
    QStringList how;
    if (!d->options.disabledRules.empty()) {
        QStringList off;
        for (const std::string &r : d->options.disabledRules)
            off << QString::fromStdString(r);
        how << tr("rules off: %1").arg(off.join(QStringLiteral(", ")));
    } else {
        how << tr("every rule on");
    }
    how << tr("strictness %1").arg(model::strictnessNames().value(int(d->options.strictness)));
    if (!d->options.strictLoad)
        how << tr("partial load");
    html += tr("<br><small>Checked against %1 · %2</small>")
                .arg((m_against.isEmpty() ? QString::fromStdString(d->against) : m_against)
                         .toHtmlEscaped(),
                     how.join(QStringLiteral(" · ")).toHtmlEscaped());
    m_banner->setText(html);
}

void DiffPanel::showDetails(const QModelIndex &proxyIndex, const QString &caption)
{
    if (!proxyIndex.isValid()) {
        m_details->clear();
        return;
    }
    const QModelIndex i = proxyIndex.siblingAtColumn(DiffListModel::NameColumn);
    const QString name = i.data(Qt::ToolTipRole).toString();
    auto cell = [&](int column) {
        return proxyIndex.siblingAtColumn(column).data().toString().toHtmlEscaped();
    };
    QString html = caption.isEmpty()
                       ? QString()
                       : QStringLiteral("<p><i>%1</i></p>").arg(caption.toHtmlEscaped());
    html += QStringLiteral("<p><b>%1</b></p>").arg(name.toHtmlEscaped());
    html += tr("<p>Status: %1 · real load: %2</p>")
                .arg(cell(DiffListModel::StatusColumn), cell(DiffListModel::LoadColumn));
    const QString sources = i.data(DiffListModel::SourcesRole).toString();
    if (!sources.isEmpty())
        html += tr("<p>Stored as: <code>%1</code></p>").arg(sources.toHtmlEscaped());
    if (!cell(DiffListModel::ReasonColumn).isEmpty())
        html += tr("<p>%1</p>").arg(cell(DiffListModel::ReasonColumn));
    const QString fix = i.data(DiffListModel::FixRole).toString();
    if (!fix.isEmpty())
        html += tr("<p><b>Fix:</b> %1</p>").arg(fix.toHtmlEscaped());
    m_details->setHtml(html);
}

} // namespace shardscope::widgets
