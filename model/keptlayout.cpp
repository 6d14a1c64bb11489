// SPDX-License-Identifier: MIT
#include "keptlayout.h"

#include <shardscope/writefile.h>

#include <QFile>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace shardscope::model {

KeptLayout::~KeptLayout()
{
    undo();
}

std::optional<Error> KeptLayout::copy(const QString &from, const QString &to)
{
    undo();
    QFile in(from);
    if (!in.open(QIODevice::ReadOnly))
        return makeError(Error::Code::Io, "cannot read the generated layout")
            .inFile(QFile::encodeName(from).toStdString());
    const QByteArray content = in.readAll();
    const std::string target = QFile::encodeName(to).toStdString();
    // A hard link, not a copy: the earlier file's bytes stay exactly as they were, and the
    // rename over `to` that writes the new one leaves them here.
    std::string aside = target + ".shardscope-earlier-" + std::to_string(::getpid());
    std::remove(aside.c_str());
    if (::link(target.c_str(), aside.c_str()) != 0) {
        if (errno != ENOENT)
            return makeError(Error::Code::Io,
                             std::string("cannot keep the layout already there: ") +
                                 std::strerror(errno))
                .inFile(target);
        aside.clear(); // nothing there before
    }
    if (auto error =
            writeFileAtomically(target, std::string_view(content.data(), content.size()))) {
        if (!aside.empty())
            std::remove(aside.c_str());
        return error;
    }
    m_to = target;
    m_aside = std::move(aside);
    return std::nullopt;
}

void KeptLayout::keep()
{
    if (!m_aside.empty())
        std::remove(m_aside.c_str());
    m_to.clear();
    m_aside.clear();
}

void KeptLayout::undo()
{
    if (m_to.empty())
        return;
    if (m_aside.empty())
        std::remove(m_to.c_str());
    else
        std::rename(m_aside.c_str(), m_to.c_str()); // over the copy, in one step
    m_to.clear();
    m_aside.clear();
}

} // namespace shardscope::model
