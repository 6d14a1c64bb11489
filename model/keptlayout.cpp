// SPDX-License-Identifier: MIT
#include "keptlayout.h"

#include <shardscope/writefile.h>

#include <QFile>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace shardscope::model {

namespace {

// Bigger than any layout: a file that size at OUT.layout.json is not one a job wrote.
constexpr qint64 kMaxEarlier = 256 << 20;

} // namespace

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
    std::optional<std::string> earlier;
    struct stat st;
    if (::stat(target.c_str(), &st) == 0) {
        if (!S_ISREG(st.st_mode) || st.st_size > kMaxEarlier)
            return makeError(Error::Code::Io, "is in the way of the layout the job writes there "
                                              "(not a layout file); move it")
                .inFile(target);
        QFile old(to);
        if (!old.open(QIODevice::ReadOnly))
            return makeError(Error::Code::Io, "cannot read the layout already there (" +
                                                  old.errorString().toStdString() + ")")
                .inFile(target);
        earlier = old.readAll().toStdString();
    } else if (errno != ENOENT) {
        return makeError(Error::Code::Io, std::string("cannot look at the layout already there: ") +
                                              std::strerror(errno))
            .inFile(target);
    }
    if (auto error = writeFileAtomically(target, std::string_view(content.data(), content.size())))
        return error;
    if (::stat(target.c_str(), &st) == 0) {
        m_device = st.st_dev;
        m_inode = st.st_ino;
    }
    m_to = target;
    m_earlier = std::move(earlier);
    return std::nullopt;
}

void KeptLayout::keep()
{
    m_to.clear();
    m_earlier.reset();
}

void KeptLayout::undo()
{
    if (m_to.empty())
        return;
    struct stat st;
    const bool ours =
        ::stat(m_to.c_str(), &st) == 0 && st.st_dev == m_device && st.st_ino == m_inode;
    if (ours) {
        if (m_earlier)
            (void)writeFileAtomically(m_to, *m_earlier); // as it was, or our copy stays
        else
            std::remove(m_to.c_str());
    }
    m_to.clear();
    m_earlier.reset();
}

} // namespace shardscope::model
