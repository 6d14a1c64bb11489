// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/layout.h>

#include <QDialog>

class QCheckBox;
class QComboBox;
class QSpinBox;

namespace shardscope::widgets {

/**
 * The options `shardscope-cli layout --from-config` takes, for a layout generated from a model
 * config: the parallel sizes the model is built with (each defaulting to the config's own, or
 * 1), the pipeline's first and last stages' layers, the Megatron-Core version that builds it,
 * and the module forms (sequential experts, MLA without the fused down projection).
 */
class LayoutOptionsDialog : public QDialog
{
    Q_OBJECT

public:
    explicit LayoutOptionsDialog(const QString &config, QWidget *parent = nullptr);

    void setOptions(const shardscope::LayoutOptions &options);
    shardscope::LayoutOptions options() const;

private:
    QCheckBox *m_sizesGiven;
    QSpinBox *m_tp, *m_pp, *m_ep, *m_etp, *m_dp, *m_first, *m_last;
    QComboBox *m_version;
    QCheckBox *m_sequential, *m_unfusedMla;
};

} // namespace shardscope::widgets
