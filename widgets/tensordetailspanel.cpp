// SPDX-License-Identifier: MIT
#include "tensordetailspanel.h"
#include "plaintooltips.h"
#include "statusstyle.h"

#include "histogramplot.h"

#include "model/chunktablemodel.h"
#include "model/formatting.h"
#include "model/roles.h"

#include <QFontDatabase>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QStackedWidget>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

using namespace shardscope::model;

namespace shardscope::widgets {

namespace {

enum Page : int { EmptyPage, TensorPage, ObjectPage, GroupPage };

QFont monospace()
{
    return QFontDatabase::systemFont(QFontDatabase::FixedFont);
}

QLabel *valueLabel(QWidget *parent)
{
    auto *l = new QLabel(parent);
    l->setFont(monospace());
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
    l->setTextFormat(Qt::PlainText); // may quote the file
    l->setMinimumWidth(60);
    return l;
}

} // namespace

TensorDetailsPanel::TensorDetailsPanel(QWidget *parent)
    : QWidget(parent)
    , m_title(new QLabel(this))
    , m_subtitle(new QLabel(this))
    , m_problems(new QLabel(this))
    , m_stack(new QStackedWidget(this))
    , m_chunkModel(new ChunkTableModel(this))
{
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(8, 4, 4, 4);
    layout->setSpacing(6);

    QFont titleFont = m_title->font();
    titleFont.setBold(true);
    titleFont.setPointSizeF(titleFont.pointSizeF() * 1.15);
    m_title->setFont(titleFont);
    m_title->setTextFormat(Qt::PlainText); // a key from the file is never markup
    m_title->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_title->setWordWrap(true);
    m_subtitle->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_subtitle->setTextFormat(Qt::PlainText); // may quote the file
    QPalette sub = m_subtitle->palette();
    sub.setColor(QPalette::WindowText, sub.color(QPalette::PlaceholderText));
    m_subtitle->setPalette(sub);
    m_problems->setWordWrap(true);
    m_problems->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_problems->setTextFormat(Qt::PlainText); // may quote the file
    m_problems->setStyleSheet(
        QStringLiteral("color: %1;").arg(attentionColor(Attention::Bad, palette()).name()));
    layout->addWidget(m_title);
    layout->addWidget(m_subtitle);
    layout->addWidget(m_problems);
    layout->addWidget(m_stack, 1);

    // Nothing selected.
    auto *empty =
        new QLabel(tr("Select a tensor to see its statistics, histogram and chunks."), m_stack);
    empty->setAlignment(Qt::AlignCenter);
    empty->setWordWrap(true);
    QPalette ep = empty->palette();
    ep.setColor(QPalette::WindowText, ep.color(QPalette::PlaceholderText));
    empty->setPalette(ep);
    m_stack->insertWidget(EmptyPage, empty);

    // Tensor.
    m_tensorPage = new QWidget(m_stack);
    auto *tl = new QVBoxLayout(m_tensorPage);
    tl->setContentsMargins(0, 0, 0, 0);
    tl->setSpacing(6);
    m_status = new QLabel(m_tensorPage);
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_status->setTextFormat(Qt::PlainText); // may quote the file
    tl->addWidget(m_status);

    auto *statsBox = new QGroupBox(tr("Statistics (finite values)"), m_tensorPage);
    auto *grid = new QGridLayout(statsBox);
    grid->setHorizontalSpacing(12);
    grid->setVerticalSpacing(3);
    m_min = addValue(grid, 0, 0, tr("Min"));
    m_max = addValue(grid, 1, 0, tr("Max"));
    m_mean = addValue(grid, 2, 0, tr("Mean"));
    m_std = addValue(grid, 3, 0, tr("Std"));
    m_l2 = addValue(grid, 4, 0, tr("L2 norm"));
    m_count = addValue(grid, 0, 2, tr("Elements"));
    m_finite = addValue(grid, 1, 2, tr("Finite"));
    m_nan = addValue(grid, 2, 2, tr("NaN"));
    m_posInf = addValue(grid, 3, 2, tr("+Inf"));
    m_negInf = addValue(grid, 4, 2, tr("−Inf"));
    grid->setColumnStretch(1, 1);
    grid->setColumnStretch(3, 1);
    tl->addWidget(statsBox);

    m_histogramBox = new QGroupBox(tr("Histogram"), m_tensorPage);
    auto *hl = new QVBoxLayout(m_histogramBox);
    hl->setContentsMargins(4, 4, 4, 4);
    m_histogram = new HistogramPlot(m_histogramBox);
    hl->addWidget(m_histogram);
    tl->addWidget(m_histogramBox, 3);

    auto *shaRow = new QHBoxLayout;
    auto *shaLabel = new QLabel(tr("SHA-256"), m_tensorPage);
    m_sha256 = new QLineEdit(m_tensorPage);
    m_sha256->setReadOnly(true);
    m_sha256->setFont(monospace());
    m_sha256->setToolTip(tr("SHA-256 of the tensor's contiguous little-endian bytes"));
    m_sha256->setFrame(false);
    QPalette shaPal = m_sha256->palette();
    shaPal.setColor(QPalette::Base, shaPal.color(QPalette::Window));
    m_sha256->setPalette(shaPal);
    shaRow->addWidget(shaLabel);
    shaRow->addWidget(m_sha256, 1);
    tl->addLayout(shaRow);

    m_chunksBox = new QGroupBox(tr("Chunks"), m_tensorPage);
    auto *cl = new QVBoxLayout(m_chunksBox);
    cl->setContentsMargins(4, 4, 4, 4);
    m_chunks = new QTableView(m_chunksBox);
    m_chunks->setModel(m_chunkModel);
    installPlainToolTips(m_chunks);
    m_chunks->setFont(monospace());
    m_chunks->verticalHeader()->hide();
    m_chunks->verticalHeader()->setDefaultSectionSize(m_chunks->fontMetrics().height() + 6);
    m_chunks->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_chunks->setAlternatingRowColors(true);
    m_chunks->setShowGrid(false);
    m_chunks->setWordWrap(false);
    m_chunks->setTextElideMode(Qt::ElideMiddle);
    m_chunks->horizontalHeader()->setStretchLastSection(true);
    m_chunks->horizontalHeader()->setHighlightSections(false);
    {
        const int digit = m_chunks->fontMetrics().horizontalAdvance(QLatin1Char('0'));
        QHeaderView *h = m_chunks->horizontalHeader();
        h->resizeSection(ChunkTableModel::IndexColumn, digit * 4);
        h->resizeSection(ChunkTableModel::OffsetsColumn, digit * 11);
        h->resizeSection(ChunkTableModel::SizesColumn, digit * 11);
        h->resizeSection(ChunkTableModel::FileColumn, digit * 15);
        h->resizeSection(ChunkTableModel::ByteOffsetColumn, digit * 12);
        h->resizeSection(ChunkTableModel::LengthColumn, digit * 10);
    }
    cl->addWidget(m_chunks);
    tl->addWidget(m_chunksBox, 2);
    m_stack->insertWidget(TensorPage, m_tensorPage);

    // Object.
    m_objectPage = new QWidget(m_stack);
    auto *ol = new QVBoxLayout(m_objectPage);
    ol->setContentsMargins(0, 0, 0, 0);
    m_objectStatus = new QLabel(m_objectPage);
    m_objectStatus->setWordWrap(true);
    m_objectText = new QPlainTextEdit(m_objectPage);
    m_objectText->setReadOnly(true);
    m_objectText->setFont(monospace());
    m_objectText->setLineWrapMode(QPlainTextEdit::NoWrap);
    ol->addWidget(m_objectStatus);
    ol->addWidget(m_objectText, 1);
    m_stack->insertWidget(ObjectPage, m_objectPage);

    // Group.
    m_groupPage = new QWidget(m_stack);
    auto *gl = new QVBoxLayout(m_groupPage);
    gl->setContentsMargins(0, 0, 0, 0);
    auto *groupBox = new QGroupBox(tr("Subtree"), m_groupPage);
    m_groupForm = new QFormLayout(groupBox);
    m_groupElements = valueLabel(groupBox);
    m_groupSize = valueLabel(groupBox);
    m_groupChunks = valueLabel(groupBox);
    m_groupProblems = valueLabel(groupBox);
    m_groupLoad = valueLabel(groupBox);
    m_groupLoad->setWordWrap(true);
    m_groupForm->addRow(tr("Elements"), m_groupElements);
    m_groupForm->addRow(tr("Size"), m_groupSize);
    m_groupForm->addRow(tr("Chunks"), m_groupChunks);
    // The tree's two columns, named as the tree and the status bar name them.
    m_groupForm->addRow(tr("Reading problems"), m_groupProblems);
    m_groupForm->addRow(tr("Load"), m_groupLoad);
    gl->addWidget(groupBox);
    gl->addStretch(1);
    m_stack->insertWidget(GroupPage, m_groupPage);

    clear();
}

TensorDetailsPanel::~TensorDetailsPanel() = default;

QLabel *TensorDetailsPanel::addValue(QGridLayout *grid, int row, int column, const QString &name)
{
    auto *label = new QLabel(name, grid->parentWidget());
    QPalette p = label->palette();
    p.setColor(QPalette::WindowText, p.color(QPalette::PlaceholderText));
    label->setPalette(p);
    QLabel *value = valueLabel(grid->parentWidget());
    grid->addWidget(label, row, column);
    grid->addWidget(value, row, column + 1);
    return value;
}

void TensorDetailsPanel::setTitle(const QString &key, const QString &subtitle)
{
    const QString shown = model::displayText(key.toStdString()); // a key: one line, as stored
    m_title->setText(shown);
    m_title->setToolTip(shown);
    m_subtitle->setText(subtitle);
    m_subtitle->setVisible(!subtitle.isEmpty());
}

void TensorDetailsPanel::setStatus(const QString &text, bool error)
{
    m_status->setText(text);
    m_status->setStyleSheet(
        error ? QStringLiteral("color: %1;").arg(attentionColor(Attention::Bad, palette()).name())
              : QString());
    m_status->setVisible(!text.isEmpty());
}

void TensorDetailsPanel::setProblems(const QStringList &problems)
{
    m_problems->setText(problems.join(QLatin1Char('\n')));
    m_problems->setVisible(!problems.isEmpty());
}

void TensorDetailsPanel::clearStats()
{
    for (QLabel *l :
         {m_min, m_max, m_mean, m_std, m_l2, m_count, m_finite, m_nan, m_posInf, m_negInf})
        l->setText(QStringLiteral("–"));
    m_sha256->clear();
    m_histogram->clear();
    m_histogramBox->setTitle(tr("Histogram"));
}

void TensorDetailsPanel::clear()
{
    m_key.clear();
    m_waiting = false;
    setTitle(tr("No selection"), QString());
    setProblems({});
    m_chunkModel->clear();
    clearStats();
    m_stack->setCurrentIndex(EmptyPage);
}

void TensorDetailsPanel::showTensor(IndexSnapshot index, int tensorIndex,
                                    const QStringList &problems)
{
    if (!index || tensorIndex < 0 || size_t(tensorIndex) >= index->tensors.size()) {
        clear();
        return;
    }
    const TensorEntry &t = index->tensors[size_t(tensorIndex)];
    m_key = QString::fromUtf8(t.key.data(), qsizetype(t.key.size()));
    m_waiting = true;
    setTitle(m_key, describeTensor(t));
    setProblems(problems);
    clearStats();
    setStatus(tr("Reading the tensor and computing statistics…"));
    m_chunkModel->setTensor(index, tensorIndex);
    m_chunksBox->setTitle(t.chunks.size() == 1 ? tr("Chunks: 1")
                                               : tr("Chunks: %1").arg(t.chunks.size()));
    m_stack->setCurrentIndex(TensorPage);
}

void TensorDetailsPanel::setTensorDetails(const TensorDetails &details)
{
    if (details.key != m_key || m_stack->currentIndex() != TensorPage)
        return;
    m_waiting = false;
    if (!details.ok()) {
        clearStats();
        setStatus(details.error, true);
        return;
    }
    if (details.hasStats) {
        const TensorHealth &s = details.stats;
        m_min->setText(formatReal(s.min));
        m_max->setText(formatReal(s.max));
        m_mean->setText(formatReal(s.mean));
        m_std->setText(formatReal(s.std));
        m_l2->setText(formatReal(s.l2));
        m_count->setText(formatCount(uint64_t(s.count)));
        m_finite->setText(formatCount(uint64_t(s.finite)));
        m_nan->setText(formatCount(uint64_t(s.nanCount)));
        m_posInf->setText(formatCount(uint64_t(s.posInfCount)));
        m_negInf->setText(formatCount(uint64_t(s.negInfCount)));
        setStatus(tr("Read and analysed in %1 ms").arg(details.elapsedMs));
    } else {
        setStatus(tr("No statistics: %1").arg(details.statsError));
    }
    m_sha256->setText(details.sha256);
    m_sha256->setCursorPosition(0);
    if (!details.histogram.empty()) {
        m_histogram->setHistogram(details.histogram, details.histogramMin, details.histogramMax,
                                  details.hasStats ? details.stats.mean : std::nan(""));
        m_histogramBox->setTitle(
            tr("Histogram: %1 bins over [%2, %3]")
                .arg(details.histogram.size())
                .arg(formatReal(details.histogramMin), formatReal(details.histogramMax)));
    }
}

void TensorDetailsPanel::showObject(const QString &key, const QString &summary,
                                    const QStringList &problems)
{
    m_key = key;
    m_waiting = true;
    setTitle(key, tr("object  ·  %1").arg(summary));
    setProblems(problems);
    m_objectStatus->setText(tr("Decoding…"));
    m_objectStatus->setStyleSheet(QString());
    m_objectStatus->show();
    m_objectText->clear();
    m_stack->setCurrentIndex(ObjectPage);
}

void TensorDetailsPanel::setObjectDetails(const ObjectDetails &details)
{
    if (details.key != m_key || m_stack->currentIndex() != ObjectPage)
        return;
    m_waiting = false;
    if (!details.ok()) {
        m_objectStatus->setText(details.error);
        m_objectStatus->setStyleSheet(
            QStringLiteral("color: %1;").arg(attentionColor(Attention::Bad, palette()).name()));
        return;
    }
    m_objectStatus->hide();
    m_subtitle->setText(tr("object  ·  %1").arg(details.summary));
    m_objectText->setPlainText(details.text);
}

void TensorDetailsPanel::showGroup(const QModelIndex &index)
{
    m_key = index.data(KeyRole).toString();
    m_waiting = false;
    setTitle(m_key,
             tr("group  ·  %1")
                 .arg(countOf(uint64_t(index.model()->rowCount(index)), "child", "children")));
    setProblems({});
    m_groupElements->setText(formatCount(index.data(NumelRole).toULongLong()));
    const qulonglong bytes = index.data(BytesRole).toULongLong();
    m_groupSize->setText(tr("%1  (%2 bytes)").arg(formatBytes(bytes), formatCount(bytes)));
    m_groupChunks->setText(formatCount(index.data(ChunkCountRole).toULongLong()));
    const int reading = index.data(ProblemCountRole).toInt();
    m_groupProblems->setText(reading == 0 ? tr("none") : formatCount(uint64_t(reading)));
    const QString load = index.siblingAtColumn(LoadColumn).data().toString();
    m_groupLoad->setText(load.isEmpty()
                             ? tr("not known (no layout yet)")
                             : tr("%1 (the keys below that carry the worst mark)").arg(load));
    m_stack->setCurrentIndex(GroupPage);
}

} // namespace shardscope::widgets
