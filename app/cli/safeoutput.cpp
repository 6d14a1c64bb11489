// SPDX-License-Identifier: MIT
#include "safeoutput.h"

#include <shardscope/escape.h>

#include <iostream>

namespace shardscope::cli {

SafeLineBuf::SafeLineBuf(std::streambuf *target)
    : m_target(target)
{}

SafeLineBuf::~SafeLineBuf()
{
    emit(true);
}

SafeLineBuf::int_type SafeLineBuf::overflow(int_type c)
{
    if (traits_type::eq_int_type(c, traits_type::eof()))
        return traits_type::not_eof(c);
    m_pending += traits_type::to_char_type(c);
    if (c == '\n')
        emit(false);
    return c;
}

std::streamsize SafeLineBuf::xsputn(const char *s, std::streamsize n)
{
    m_pending.append(s, size_t(n));
    if (m_pending.find('\n', m_pending.size() - size_t(n)) != std::string::npos)
        emit(false);
    return n;
}

int SafeLineBuf::sync()
{
    emit(true);
    return m_target->pubsync();
}

// Whole lines only (a UTF-8 sequence never straddles two writes of one line), or everything
// on a flush.
void SafeLineBuf::emit(bool all)
{
    const size_t end = all ? m_pending.size() : m_pending.rfind('\n') + 1;
    if (end == 0 || end > m_pending.size())
        return;
    const std::string text = visibleLines(std::string_view(m_pending).substr(0, end));
    m_target->sputn(text.data(), std::streamsize(text.size()));
    m_pending.erase(0, end);
}

SafeOutput::SafeOutput()
    : m_out(std::cout.rdbuf())
    , m_err(std::cerr.rdbuf())
    , m_oldOut(std::cout.rdbuf(&m_out))
    , m_oldErr(std::cerr.rdbuf(&m_err))
{}

SafeOutput::~SafeOutput()
{
    std::cout.flush();
    std::cerr.flush();
    std::cout.rdbuf(m_oldOut);
    std::cerr.rdbuf(m_oldErr);
}

} // namespace shardscope::cli
