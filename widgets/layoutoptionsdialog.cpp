// SPDX-License-Identifier: MIT
#include "layoutoptionsdialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QSpinBox>
#include <QVBoxLayout>

namespace shardscope::widgets {

namespace {

QSpinBox *box(QWidget *parent, int min, const QString &special = {})
{
    auto *b = new QSpinBox(parent);
    b->setRange(min, 1 << 16);
    b->setValue(min);
    if (!special.isEmpty())
        b->setSpecialValueText(special);
    return b;
}

} // namespace

LayoutOptionsDialog::LayoutOptionsDialog(const QString &config, QWidget *parent)
    : QDialog(parent)
    , m_sizesGiven(new QCheckBox(tr("Build the model with these parallel sizes"), this))
    , m_version(new QComboBox(this))
    , m_sequential(new QCheckBox(tr("Sequential experts (local_experts.<e>)"), this))
    , m_unfusedMla(new QCheckBox(tr("MLA without the fused down projection"), this))
{
    setWindowTitle(tr("Layout of %1").arg(QFileInfo(config).fileName()));
    m_tp = box(this, 1);
    m_pp = box(this, 1);
    m_ep = box(this, 1);
    m_etp = box(this, 1);
    m_dp = box(this, 1);
    m_first = box(this, 0, tr("even split"));
    m_last = box(this, 0, tr("even split"));
    m_sizesGiven->setToolTip(tr("Unticked: Megatron arguments' own sizes, else 1"));
    for (QSpinBox *b : {m_tp, m_pp, m_ep, m_etp, m_dp, m_first, m_last}) {
        b->setEnabled(false);
        connect(m_sizesGiven, &QCheckBox::toggled, b, &QWidget::setEnabled);
    }
    m_version->addItem(tr("main (fused MLA down projection)"), QStringLiteral("main"));
    m_version->addItem(tr("0.16 (the newest release)"), QStringLiteral("0.16"));
    m_version->setObjectName(QStringLiteral("megatronVersion"));

    auto *form = new QFormLayout;
    form->addRow(m_sizesGiven);
    form->addRow(tr("Tensor parallel"), m_tp);
    form->addRow(tr("Pipeline parallel"), m_pp);
    form->addRow(tr("Expert parallel"), m_ep);
    form->addRow(tr("Expert tensor parallel"), m_etp);
    form->addRow(tr("Data parallel (FSDP shard)"), m_dp);
    form->addRow(tr("First stage layers"), m_first);
    form->addRow(tr("Last stage layers"), m_last);
    form->addRow(tr("Megatron-Core"), m_version);
    form->addRow(m_sequential);
    form->addRow(m_unfusedMla);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    auto *layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(buttons);
}

void LayoutOptionsDialog::setOptions(const LayoutOptions &o)
{
    m_sizesGiven->setChecked(o.parallelGiven);
    m_tp->setValue(o.parallel.tp);
    m_pp->setValue(o.parallel.pp);
    m_ep->setValue(o.parallel.ep);
    m_etp->setValue(o.parallel.etp);
    m_dp->setValue(o.parallel.dpShard);
    m_first->setValue(o.parallel.firstStageLayers);
    m_last->setValue(o.parallel.lastStageLayers);
    m_version->setCurrentIndex(
        std::max(0, m_version->findData(QString::fromStdString(o.megatronVersion))));
    m_sequential->setChecked(o.sequentialExperts);
    m_unfusedMla->setChecked(o.mlaDownProjFusion == false);
}

LayoutOptions LayoutOptionsDialog::options() const
{
    LayoutOptions o;
    o.parallelGiven = m_sizesGiven->isChecked();
    if (o.parallelGiven) {
        o.parallel.tp = m_tp->value();
        o.parallel.pp = m_pp->value();
        o.parallel.ep = m_ep->value();
        o.parallel.etp = m_etp->value();
        o.parallel.dpShard = m_dp->value();
        o.parallel.firstStageLayers = m_first->value();
        o.parallel.lastStageLayers = m_last->value();
    }
    o.megatronVersion = m_version->currentData().toString().toStdString();
    o.sequentialExperts = m_sequential->isChecked();
    if (m_unfusedMla->isChecked())
        o.mlaDownProjFusion = false;
    return o;
}

} // namespace shardscope::widgets
