// SPDX-License-Identifier: MIT
#pragma once

#include <shardscope/session.h>

#include <QStringList>

namespace shardscope::model {

/**
 * The shardscope-cli command lines that do what the window does, so that a result can be
 * reproduced, scripted or attached to a bug: the same options give the same output (the
 * report's content included), because both drive the same front door.
 */
namespace repro {

/** `layout --from-config CONFIG [sizes] -o OUT`: the step that generates a config's layout. */
QStringList layout(const QString &config, const shardscope::LayoutOptions &options,
                   const QString &out);
/** The diff's options as flags (defaults left out). */
QStringList diffOptions(const shardscope::DiffOptions &options);
/** `diff CKPT --layout L …` (subcommand "diff" or "report"; a report adds `-o OUT`). */
QStringList diff(const QString &subcommand, const QString &checkpoint, const QString &layout,
                 const shardscope::DiffOptions &options, const QString &out = {});
/** `diff A --against B [--values [--layout L] [--rtol R] [--atol A]] …`. */
QStringList compare(const QString &subcommand, const QString &first, const QString &second,
                    const shardscope::DiffOptions &options,
                    const shardscope::ValueDiffRequest *values, const QString &layout,
                    const QString &out = {});
/** `fix CKPT --layout L [the load's options] -o OUT` (the options fix takes: rules,
 *  strictness, a non-strict load, no optimizer). */
QStringList fix(const QString &checkpoint, const QString &layout,
                const shardscope::DiffOptions &options, const QString &out);
/** `verify CKPT --layout L [sizes] [--disable-rule R] [--max-memory B] [--threads T]`. */
QStringList verify(const QString &checkpoint, const QString &layout,
                   const shardscope::VerifyRequest &request);
/** One shell line (each argument quoted where it needs it; shellCommand()). */
QString commandLine(const QStringList &arguments);

} // namespace repro

} // namespace shardscope::model
