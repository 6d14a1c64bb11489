// SPDX-License-Identifier: MIT
#include "filterbar.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QTimer>

namespace shardscope::widgets {

FilterBar::FilterBar(QWidget *parent)
    : QWidget(parent)
    , m_edit(new QLineEdit(this))
    , m_dtype(new QComboBox(this))
    , m_problemsOnly(new QCheckBox(tr("Problems only"), this))
    , m_debounce(new QTimer(this))
{
    m_edit->setPlaceholderText(tr("Filter keys: substring, or glob such as *.mlp.*.weight"));
    m_edit->setClearButtonEnabled(true);
    m_edit->setToolTip(tr("Case-insensitive. Use * ? [..] for a glob matched anywhere in the "
                          "key."));
    m_dtype->setToolTip(tr("Show only tensors of this dtype"));
    m_dtype->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    m_dtype->addItem(tr("All dtypes"), QString());
    m_problemsOnly->setToolTip(tr("Show only entries that a problem names"));

    auto *layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(8);
    layout->addWidget(m_edit, 1);
    layout->addWidget(m_dtype);
    layout->addWidget(m_problemsOnly);

    m_debounce->setSingleShot(true);
    m_debounce->setInterval(DebounceMs);
    connect(m_edit, &QLineEdit::textChanged, m_debounce, qOverload<>(&QTimer::start));
    connect(m_debounce, &QTimer::timeout, this, [this] { Q_EMIT textChanged(m_edit->text()); });
    // Enter applies at once.
    connect(m_edit, &QLineEdit::returnPressed, this, [this] {
        m_debounce->stop();
        Q_EMIT textChanged(m_edit->text());
    });
    connect(m_dtype, &QComboBox::currentIndexChanged, this,
            [this] { Q_EMIT dtypeChanged(dtype()); });
    connect(m_problemsOnly, &QCheckBox::toggled, this, &FilterBar::problemsOnlyChanged);
}

QString FilterBar::text() const
{
    return m_edit->text();
}

QString FilterBar::dtype() const
{
    return m_dtype->currentData().toString();
}

bool FilterBar::problemsOnly() const
{
    return m_problemsOnly->isChecked();
}

void FilterBar::setDTypes(const QStringList &dtypes)
{
    const QString current = dtype();
    {
        const QSignalBlocker block(m_dtype);
        m_dtype->clear();
        m_dtype->addItem(tr("All dtypes"), QString());
        for (const QString &d : dtypes)
            m_dtype->addItem(d, d);
        const int keep = m_dtype->findData(current);
        m_dtype->setCurrentIndex(keep < 0 ? 0 : keep);
    }
    if (dtype() != current)
        Q_EMIT dtypeChanged(dtype());
}

void FilterBar::reset()
{
    m_edit->clear();
    m_debounce->stop();
    Q_EMIT textChanged(QString());
    m_dtype->setCurrentIndex(0);
    m_problemsOnly->setChecked(false);
}

void FilterBar::setText(const QString &text)
{
    m_edit->setText(text);
}

} // namespace shardscope::widgets
