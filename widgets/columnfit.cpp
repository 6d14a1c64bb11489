// SPDX-License-Identifier: MIT
#include "columnfit.h"

#include <QHeaderView>
#include <QTreeView>

#include <algorithm>

namespace shardscope::widgets {

namespace {

void fit(QTreeView *view, double maxShare)
{
    QHeaderView *h = view->header();
    // A view lays its rows out lazily after a reset: measure what it will show, not nothing.
    view->doItemsLayout();
    // Before the view is laid out its viewport has no width yet: assume a small window's.
    const int width = std::max(view->viewport()->width(), 900);
    const int cap = int(width * maxShare);
    for (int c = 0; c < h->count(); ++c) {
        // The last section on screen stretches to the edge (sections may have been moved).
        if (h->isSectionHidden(c) || h->visualIndex(c) == h->count() - 1)
            continue;
        // Public through the base class (QTreeView keeps its override protected).
        const QAbstractItemView *base = view;
        const int wanted = std::max(base->sizeHintForColumn(c), h->sectionSizeHint(c));
        h->resizeSection(c, std::min(wanted + 8, cap));
    }
}

} // namespace

void fitColumnsToContents(QTreeView *view, double maxShare)
{
    QHeaderView *h = view->header();
    h->setResizeContentsPrecision(200);
    h->setStretchLastSection(true);
    fit(view, maxShare);
    if (QAbstractItemModel *m = view->model())
        QObject::connect(m, &QAbstractItemModel::modelReset, view,
                         [view, maxShare] { fit(view, maxShare); });
}

} // namespace shardscope::widgets
