// SPDX-License-Identifier: MIT
#pragma once

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLineEdit;
class QTimer;

namespace shardscope::widgets {

/**
 * Filter controls above the tree: key text (substring or glob, debounced 200 ms), dtype, and
 * "problems only". Emits what changed; the owner hands it to a CheckpointFilterProxy.
 */
class FilterBar : public QWidget
{
    Q_OBJECT

public:
    static constexpr int DebounceMs = 200;

    explicit FilterBar(QWidget *parent = nullptr);

    QString text() const;
    /** Selected dtype; empty for all. */
    QString dtype() const;
    bool problemsOnly() const;
    /** Offers these dtypes (keeps the selection when it is still offered). */
    void setDTypes(const QStringList &dtypes);
    /** Sets the filter text as if typed (emitted after the debounce). */
    void setText(const QString &text);
    /** Clears every criterion (emitting the changes at once, without debounce). */
    void reset();
    QLineEdit *lineEdit() const { return m_edit; }

Q_SIGNALS:
    void textChanged(const QString &text); ///< debounced
    void dtypeChanged(const QString &dtype);
    void problemsOnlyChanged(bool on);

private:
    QLineEdit *m_edit = nullptr;
    QComboBox *m_dtype = nullptr;
    QCheckBox *m_problemsOnly = nullptr;
    QTimer *m_debounce = nullptr;
};

} // namespace shardscope::widgets
