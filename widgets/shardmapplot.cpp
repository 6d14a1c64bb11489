// SPDX-License-Identifier: MIT
#include "shardmapplot.h"

#include "model/formatting.h"
#include "qcustomplotinclude.h"
#include "statusstyle.h"

#include <cmath>

namespace shardscope::widgets {

namespace {

QColor fileColor(int file)
{
    // Hues spread by the golden angle: neighbouring files never look alike.
    return QColor::fromHsvF(std::fmod(0.58 + file * 0.381966, 1.0), 0.45, 0.9);
}

QColor rankColor(int rank)
{
    return QColor::fromHsvF(std::fmod(0.05 + rank * 0.381966, 1.0), 0.9, 0.65);
}

QCPItemRect *boxItem(QCustomPlot *plot, const model::ShardMap::Box &b)
{
    auto *r = new QCPItemRect(plot);
    r->topLeft->setCoords(double(b.col), double(b.row));
    r->bottomRight->setCoords(double(b.col + b.cols), double(b.row + b.rows));
    r->setSelectable(false);
    return r;
}

} // namespace

ShardMapPlot::ShardMapPlot(QWidget *parent)
    : PlotFrame(parent)
{
    QCustomPlot *p = plot();
    p->yAxis->setRangeReversed(true); // row 0 on top, as a matrix reads
    p->xAxis->setLabel(tr("column"));
    p->yAxis->setLabel(tr("row"));
    p->xAxis->setNumberFormat(QStringLiteral("gb"));
    p->yAxis->setNumberFormat(QStringLiteral("gb"));
    p->legend->setVisible(false);
    // The files' legend under the map's corner, where the rank labels (top right) are not.
    p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignBottom | Qt::AlignLeft);
    // A title row above the map: chunks, files, and what is wrong with them.
    p->plotLayout()->insertRow(0);
    m_title = new QCPTextElement(p, QString(), font());
    m_title->setTextColor(palette().color(QPalette::Text));
    p->plotLayout()->addElement(0, 0, m_title);
    setHoverAt([this](double col, double row) { return describe(col, row); });
    setMinimumHeight(160);
}

void ShardMapPlot::setMap(model::ShardMap map)
{
    m_map = std::move(map);
    QCustomPlot *p = plot();
    p->clearItems();
    p->clearPlottables();
    p->legend->setVisible(false);
    if (!m_map.valid()) {
        m_title->setText(tr("Select a tensor to see where its elements are stored."));
        p->xAxis->setRange(0, 1);
        p->yAxis->setRange(0, 1);
        p->replot();
        return;
    }
    const QPalette pal = palette();
    // The whole tensor, hatched: what no chunk covers stays hatched.
    QCPItemRect *whole = boxItem(p, {0, 0, m_map.rows, m_map.cols});
    whole->setPen(QPen(pal.color(QPalette::Text), 1));
    whole->setBrush(QBrush(attentionColor(Attention::Bad, pal), Qt::BDiagPattern));
    for (size_t i = 0; i < m_map.chunks.size() && i < MaxBoxes; ++i) {
        const auto &c = m_map.chunks[i];
        QCPItemRect *r = boxItem(p, c);
        r->setBrush(fileColor(c.file));
        r->setPen(c.overlaps ? QPen(attentionColor(Attention::Bad, pal), 2)
                             : QPen(pal.color(QPalette::Base), 1));
    }
    // One legend entry per file (an empty graph carries its colour).
    for (int f = 0; f < m_map.files.size() && f < 12; ++f) {
        QCPGraph *g = p->addGraph();
        g->setName(m_map.files[f]);
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(
            QCPScatterStyle(QCPScatterStyle::ssSquare, fileColor(f), fileColor(f), 9));
    }
    p->legend->setVisible(!m_map.files.isEmpty());
    for (const auto &s : m_map.sections) {
        auto *line = new QCPItemLine(p);
        line->start->setCoords(0, double(s.row));
        line->end->setCoords(double(m_map.cols), double(s.row));
        line->setPen(QPen(pal.color(QPalette::Text), 1.5, Qt::DashLine));
        auto *label = new QCPItemText(p);
        label->position->setCoords(double(m_map.cols) * 0.01, double(s.row) + s.rows * 0.02);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->setText(s.name);
        label->setColor(pal.color(QPalette::Text));
    }
    for (const auto &read : m_map.reads) {
        QCPItemRect *r = boxItem(p, read);
        r->setBrush(Qt::NoBrush);
        r->setPen(QPen(rankColor(read.rank), 2, Qt::DotLine));
        auto *label = new QCPItemText(p);
        label->position->setCoords(double(read.col + read.cols), double(read.row));
        label->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
        label->setText(tr("rank %1").arg(read.rank));
        label->setColor(rankColor(read.rank));
    }
    const double padR = std::max(1.0, m_map.rows * 0.02), padC = std::max(1.0, m_map.cols * 0.02);
    p->xAxis->setRange(-padC, double(m_map.cols) + padC);
    p->yAxis->setRange(-padR, double(m_map.rows) + padR);
    QString title = tr("%1 %2 in %3 %4")
                        .arg(model::formatCount(m_map.chunks.size()),
                             m_map.chunks.size() == 1 ? tr("chunk") : tr("chunks"))
                        .arg(m_map.files.size())
                        .arg(m_map.files.size() == 1 ? tr("file") : tr("files"));
    if (!m_map.reads.empty())
        title += tr(" · read by %1 planned %2")
                     .arg(m_map.reads.size())
                     .arg(m_map.reads.size() == 1 ? tr("read") : tr("reads"));
    if (m_map.chunks.size() > MaxBoxes)
        title += tr(" (first %1 drawn)").arg(model::formatCount(MaxBoxes));
    if (m_map.uncovered > 0)
        title += tr(" · %1 cells held by no chunk").arg(model::formatCount(m_map.uncovered));
    if (m_map.folded)
        title += tr(" · dims beyond the second folded");
    m_title->setText(title);
    p->replot();
}

QString ShardMapPlot::describe(double col, double row) const
{
    if (!m_map.valid() || row < 0 || col < 0 || row >= double(m_map.rows) ||
        col >= double(m_map.cols))
        return {};
    const auto r = int64_t(row), c = int64_t(col);
    QStringList lines{tr("row %1, column %2").arg(r).arg(c)};
    auto inside = [r, c](const model::ShardMap::Box &b) {
        return r >= b.row && r < b.row + b.rows && c >= b.col && c < b.col + b.cols;
    };
    bool held = false;
    for (size_t i = 0; i < m_map.chunks.size(); ++i)
        if (inside(m_map.chunks[i])) {
            const auto &b = m_map.chunks[i];
            lines << tr("chunk %1 in %2: rows %3–%4, columns %5–%6")
                         .arg(i)
                         .arg(m_map.files.value(b.file))
                         .arg(b.row)
                         .arg(b.row + b.rows)
                         .arg(b.col)
                         .arg(b.col + b.cols);
            held = true;
        }
    if (!held)
        lines << tr("held by no chunk");
    for (const auto &s : m_map.sections)
        if (r >= s.row && r < s.row + s.rows)
            lines << tr("fills %1").arg(s.name);
    for (const auto &b : m_map.reads)
        if (inside(b))
            lines << tr("read by rank %1").arg(b.rank);
    return lines.join(QLatin1Char('\n'));
}

} // namespace shardscope::widgets
