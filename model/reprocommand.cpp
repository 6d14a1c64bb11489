// SPDX-License-Identifier: MIT
#include "reprocommand.h"

namespace shardscope::model::repro {

namespace {

const QString Cli = QStringLiteral("shardscope-cli");

QString text(std::string_view s)
{
    return QString::fromUtf8(s.data(), qsizetype(s.size()));
}

void addSize(QStringList &args, const char *flag, int value, int unset)
{
    if (value != unset)
        args << QString::fromLatin1(flag) << QString::number(value);
}

} // namespace

QStringList layout(const QString &config, const LayoutOptions &options, const QString &out)
{
    QStringList args{Cli, QStringLiteral("layout"), QStringLiteral("--from-config"), config};
    if (options.parallelGiven) {
        const ParallelConfig &p = options.parallel;
        addSize(args, "--tp", p.tp, 0);
        addSize(args, "--pp", p.pp, 0);
        addSize(args, "--ep", p.ep, 0);
        addSize(args, "--etp", p.etp, 0);
        addSize(args, "--dp", p.dpShard, 0);
        addSize(args, "--pp-first-layers", p.firstStageLayers, 0);
        addSize(args, "--pp-last-layers", p.lastStageLayers, 0);
    }
    if (options.megatronVersion != "main")
        args << QStringLiteral("--megatron-version") << text(options.megatronVersion);
    if (options.mlaDownProjFusion == false)
        args << QStringLiteral("--no-mla-down-proj-fusion");
    if (options.sequentialExperts)
        args << QStringLiteral("--sequential-experts");
    if (options.dtype)
        args << QStringLiteral("--dtype") << text(*options.dtype);
    args << QStringLiteral("-o") << out;
    return args;
}

QStringList diffOptions(const DiffOptions &o)
{
    const DiffOptions defaults;
    QStringList args;
    if (o.strictness != defaults.strictness)
        args << QStringLiteral("--strictness") << text(strictnessName(o.strictness));
    if (!o.strictLoad)
        args << QStringLiteral("--no-strict");
    for (const std::string &r : o.disabledRules)
        args << QStringLiteral("--disable-rule") << text(r);
    if (!o.includeOptimizer)
        args << QStringLiteral("--no-optimizer");
    if (o.measureCasts)
        args << QStringLiteral("--measure-casts");
    if (o.failOnCast)
        args << QStringLiteral("--fail-on-cast");
    if (o.checkInit)
        args << QStringLiteral("--check-init");
    return args;
}

QStringList diff(const QString &subcommand, const QString &checkpoint, const QString &layout,
                 const DiffOptions &options, const QString &out)
{
    QStringList args{Cli, subcommand, checkpoint, QStringLiteral("--layout"), layout};
    args << diffOptions(options);
    if (!out.isEmpty())
        args << QStringLiteral("-o") << out;
    return args;
}

QStringList fix(const QString &checkpoint, const QString &layout, const DiffOptions &options,
                const QString &out)
{
    DiffOptions load = options; // what fix repairs for; it measures nothing
    load.measureCasts = load.failOnCast = load.checkInit = false;
    return diff(QStringLiteral("fix"), checkpoint, layout, load, out);
}

QStringList compare(const QString &subcommand, const QString &first, const QString &second,
                    const DiffOptions &options, const ValueDiffRequest *values,
                    const QString &layout, const QString &out)
{
    QStringList args{Cli, subcommand, first, QStringLiteral("--against"), second};
    if (values) {
        args << QStringLiteral("--values");
        if (!layout.isEmpty())
            args << QStringLiteral("--layout") << layout;
        if (values->rtol > 0)
            args << QStringLiteral("--rtol") << QString::number(values->rtol, 'g', 17);
        if (values->atol > 0)
            args << QStringLiteral("--atol") << QString::number(values->atol, 'g', 17);
    }
    args << diffOptions(options);
    if (!out.isEmpty())
        args << QStringLiteral("-o") << out;
    return args;
}

QStringList verify(const QString &checkpoint, const QString &layout, const VerifyRequest &r)
{
    QStringList args{Cli, QStringLiteral("verify"), checkpoint, QStringLiteral("--layout"), layout};
    addSize(args, "--tp", r.tp, 0);
    addSize(args, "--pp", r.pp, 0);
    addSize(args, "--ep", r.ep, 0);
    addSize(args, "--etp", r.etp, 0);
    addSize(args, "--dp", r.dp, 0);
    addSize(args, "--pp-first-layers", r.firstStageLayers, -1);
    addSize(args, "--pp-last-layers", r.lastStageLayers, -1);
    for (const std::string &rule : r.disabledRules)
        args << QStringLiteral("--disable-rule") << text(rule);
    if (r.maxMemory)
        args << QStringLiteral("--max-memory") << QString::number(r.maxMemory);
    if (r.threads)
        args << QStringLiteral("--threads") << QString::number(r.threads);
    if (r.hash)
        args << QStringLiteral("--hash");
    return args;
}

QString commandLine(const QStringList &arguments)
{
    std::vector<std::string> argv;
    argv.reserve(size_t(arguments.size()));
    for (const QString &a : arguments)
        argv.push_back(a.toStdString());
    return QString::fromStdString(shellCommand(argv));
}

} // namespace shardscope::model::repro
