// SPDX-License-Identifier: MIT
#pragma once

#include <ostream>
#include <streambuf>
#include <string>

namespace shardscope::cli {

/**
 * Defence in depth under the escaping every print site does (shardscope/escape.h): a stream
 * buffer that passes whole lines on with anything a terminal acts on made visible, so that no
 * name a site forgot can retitle, recolour or rewrite the user's terminal. Line breaks pass.
 */
class SafeLineBuf : public std::streambuf
{
public:
    explicit SafeLineBuf(std::streambuf *target);
    ~SafeLineBuf() override;

protected:
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char *s, std::streamsize n) override;
    int sync() override;

private:
    void emit(bool all);
    std::streambuf *m_target;
    std::string m_pending;
};

/** Puts a SafeLineBuf under std::cout and std::cerr for as long as it lives. */
class SafeOutput
{
public:
    SafeOutput();
    ~SafeOutput();
    SafeOutput(const SafeOutput &) = delete;
    SafeOutput &operator=(const SafeOutput &) = delete;

private:
    SafeLineBuf m_out, m_err;
    std::streambuf *m_oldOut, *m_oldErr;
};

} // namespace shardscope::cli
